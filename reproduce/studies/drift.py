"""How fast a continual DAPO run drifts from θ*: the numbers that choose a stage-2 clock (tiny-slow.yaml).

    python -m reproduce.studies.drift runs/slowprobe/lr15 runs/slowprobe/lr30 ...   # dapo_cont-like runs

For each run folder (its config.yaml, metrics.jsonl and validation.jsonl): the stage-2 clock (optim.lr,
updates a step = epochs × mini-batches), the per-token reverse KL to πref = θ* (metric `kl_reverse`, a token
mean over the step's on-policy samples) averaged over 5-step windows, the end KL (mean of the last `WINDOW`
steps), the drift per step (end KL / steps) against the paper's (`PAPER_KL` = 0.025 after `PAPER_STEPS` = 100
steps of DAPO from θ*, Fig. 2b), and the validation curve's start, peak and end (mean of its last 3 points)
with the fall from peak to end. Reads the run folders only.

The rule that chose tiny-slow (records/toy_world_probes.md, "A second regime"), applied to DAPO's curves
only: among the candidate clocks, the one whose drift per step is nearest the paper's (least |log(ratio)|)
while its validation still falls by at least COLLAPSE_DROP (figures.checklist: 0.03) from its peak to its end
within the stage-2 budget (stage 1 is the tiny preset's, whose DAPO collapses on every seed).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Optional

from common.jsonl import read_jsonl
from common.yaml_config import read_yaml

PAPER_KL, PAPER_STEPS = 0.025, 100
WINDOW = 5
END_POINTS = 3
COLLAPSE_DROP = 0.03


def drift(run: Path) -> dict:
    """The numbers of one run folder (see the module docstring)."""
    run = Path(run)
    cfg = read_yaml(run / "config.yaml")
    batch = cfg.get("batch", {})
    rows = read_jsonl(run / "metrics.jsonl")
    kl = {int(r["step"]): float(r["kl_reverse"]) for r in rows if "kl_reverse" in r}
    if not kl:
        raise ValueError(f"{run}: no kl_reverse in metrics.jsonl")
    steps = sorted(kl)
    last = steps[-1]
    end_kl = sum(kl[s] for s in steps[-WINDOW:]) / len(steps[-WINDOW:])
    windows = {}
    for hi in range(10, last + 1, 10):
        w = [kl[s] for s in steps if hi - WINDOW < s <= hi]
        if w:
            windows[hi] = sum(w) / len(w)
    val = sorted((int(r["step"]), float(r["value"])) for r in read_jsonl(run / "validation.jsonl"))
    vals = [v for _, v in val]
    end = sum(vals[-END_POINTS:]) / len(vals[-END_POINTS:]) if vals else None
    per_step = end_kl / last
    return {"run": str(run), "lr": cfg.get("optim", {}).get("lr"),
            "updates": batch.get("epochs", 1) * max(1, batch.get("prompts_per_step", 1)
                                                    // max(1, batch.get("mini_batch_prompts", 1))),
            "steps": last, "kl_windows": windows, "end_kl": end_kl, "per_step": per_step,
            "vs_paper": per_step / (PAPER_KL / PAPER_STEPS), "val": val, "val_end": end,
            "val_peak": max(vals) if vals else None,
            "fall": (max(vals) - end) if vals else None}


def choose(rows: list[dict]) -> Optional[dict]:
    """The rule: nearest the paper's drift per step (|log ratio|) among the runs whose validation still falls
    by ≥ COLLAPSE_DROP; None when none does."""
    ok = [r for r in rows if r["fall"] is not None and r["fall"] >= COLLAPSE_DROP and r["per_step"] > 0]
    return min(ok, key=lambda r: abs(math.log(r["vs_paper"]))) if ok else None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reproduce.studies.drift", description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args(argv)
    rows = [drift(Path(r)) for r in a.runs]
    print(f"paper: per-token reverse KL {PAPER_KL} after {PAPER_STEPS} steps = "
          f"{PAPER_KL / PAPER_STEPS:.2e} a step")
    for r in rows:
        print(f"{r['run']}: lr {r['lr']}, {r['updates']} updates a step, {r['steps']} steps")
        print("  KL to θ*, 5-step means: " + ", ".join(f"{s}: {v:.4f}" for s, v in r["kl_windows"].items()))
        print(f"  end KL {r['end_kl']:.4f} -> {r['per_step']:.2e} a step = {r['vs_paper']:.1f} x the paper's")
        print("  validation " + " ".join(f"{s}:{v:.3f}" for s, v in r["val"]))
        print(f"  peak {r['val_peak']:.3f}, end {r['val_end']:.3f}, fall {r['fall']:.3f}"
              + (" (falls)" if r["fall"] >= COLLAPSE_DROP else f" (< {COLLAPSE_DROP}: no fall)"))
    best = choose(rows)
    print(f"rule: {best['run'] if best else 'no candidate falls'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build the toy world: data splits, tokenizer and SFT base model, with acceptance checks.

    python -m reproduce.toy.build --out DIR [--seed S] [--quick] [--version V] [--arch A] [--rebuild]
    python -m reproduce.toy.build --ship [--version V]     # rebuild the shipped reproduce/worlds/<hash>/

Writes (atomically: built in ``DIR.tmp<pid>`` then renamed)::

    DIR/data/{train,validation,test}.jsonl   benchmark-style JSON lines (problem, answer, id, metadata)
    DIR/base_model/                          Qwen2ForCausalLM + tokenizer (save_pretrained; loads offline)
    DIR/world.json                           config, config hash, split stats, SFT stats, checks

Cached: if ``DIR/world.json`` exists with the same config hash, nothing is done. ``--quick`` runs a short SFT
(``sft.QUICK_SFT``, ~40 s) through the same code path and skips the acceptance checks (tests, the ``smoke``
preset).

Shipped: the repository carries built worlds in ``reproduce/worlds/<config hash>/`` (SHIPPED_DIR; the tiny
presets' world v2, 2.9 MB). A build whose config hash has a shipped copy copies it (seconds) instead of
running the SFT (~3 min); ``--rebuild`` builds from scratch. ``--ship`` rebuilds the shipped copy itself
(remove the old folder first); tests/integration/test_toy_world.py (slow) checks that a rebuild equals the
shipped world file for file, byte for byte (world.json: all but its timings).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from common.jsonl import write_jsonl

from . import task as T
from .model import ARCHS, ModelConfig, build_model, n_params, sample
from .sft import QUICK_SFT, SFTConfig, sft
from .tokenizer import build_tokenizer

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "worlds"   # reproduce/worlds/<config hash>/
MODEL = ModelConfig()
# The same model with 2 heads of width 32: vLLM's CPU attention takes head widths 32 to 512 (MODEL's are 16),
# so the real-vLLM test tier (tests/vllm_real) builds its quick world with this one.
VLLM_CPU_MODEL = ModelConfig(num_attention_heads=2, num_key_value_heads=2)
# The tier's quick worlds of the paper models' layouts (`build_world(..., quick=True, model=QWEN3_ARCH)`):
# reproduce.toy.model QWEN2_ARCH (Qwen2.5-Math-7B's) and QWEN3_ARCH (Qwen3-8B-Base's), built by the same code.
# The world designs (docs/toy_world.md). v1: the blind-spot chain never borrows (no headroom above its
# ceiling). v2 (in design, issue 15): chains borrow right at p_correct_borrow in the SFT data, a train_natural
# split for the headroom control, a longer SFT (800 steps) so that the arithmetic of the rarer borrow steps is
# learned.
WORLDS = {
    1: (T.TaskConfig(), SFTConfig()),
    2: (T.TaskConfig(p_correct_borrow=0.2, n_train_natural=4096), SFTConfig(steps=800)),
}
WORLD_VERSION = 1                                   # the default design (the tiny and smoke presets' world)
TASK, SFT = WORLDS[WORLD_VERSION]

# Acceptance checks on the SFT base model (validation split, T = 1 sampling, 4 samples per prompt).
CHECKS = {
    "val_acc_T1": (0.25, 0.55),  # neither hopeless nor saturated
    "chain_share_T1": (0.40, 0.85),  # the chain is the main mode ...
    "shortcut_share_T1": (0.01, 0.20),  # ... the shortcut exists but is a minority
    "well_formed_T1": (0.95, 1.0),  # responses end with \boxed{d}
    "greedy_acc": (0.50, 1.0),  # greedy follows the chain (ceiling ~0.7)
}


# World v2 (TASK.p_correct_borrow > 0): the base borrows right on a share of its chains' borrow steps inside
# this band (measured on train_natural[:1024] x 2 samples at T = 1). The race it decides
# (records/toy_world_probes.md, "World v2"): at .28 DAPO learned to borrow and never over-optimized; at .10
# the shortcut won on every seed.
BORROW_CHECK = {"borrow_rate_T1": (0.06, 0.16)}


def checks_of(task: T.TaskConfig) -> dict:
    """The acceptance bands of a world with this task (the borrow band only where chains can borrow)."""
    return {**CHECKS, **(BORROW_CHECK if task.p_correct_borrow > 0 else {})}


class WorldCheckError(RuntimeError):
    pass


def _print(msg: str) -> None:
    print(msg, flush=True)


def world_config(seed: int, quick: bool, version: int = WORLD_VERSION, model: ModelConfig = MODEL) -> dict:
    if version not in WORLDS:
        raise ValueError(f"world version {version!r} is not a world design (known: {sorted(WORLDS)})")
    task, sft_cfg = WORLDS[version]
    return {
        "version": version,
        "seed": seed,
        "quick": quick,
        "task": task.to_dict(),
        "model": model.to_dict(),
        "sft": (QUICK_SFT if quick else sft_cfg).to_dict(),
        "checks": {k: list(v) for k, v in checks_of(task).items()} if not quick else {},
    }


def prompt_ids(tok, problem: str) -> list[int]:
    return tok.apply_chat_template([{"role": "user", "content": problem}], add_generation_prompt=True,
                                   tokenize=True, return_dict=True)["input_ids"]


@torch.no_grad()
def evaluate_model(model, tok, records: list[dict], samples: int = 4, temperature: float = 1.0,
                   top_p: float = 1.0, max_new_tokens: int = 40, seed: int = 0, batch: int = 256) -> dict:
    """Sampled accuracy and the mix of modes (task.classify) over ``records`` x ``samples``."""
    gen = torch.Generator().manual_seed(seed)
    items = [r for r in records for _ in range(samples)]
    correct = 0
    modes: Counter = Counter()
    well = 0
    for i in range(0, len(items), batch):
        chunk = items[i:i + batch]
        outs = sample(model, [prompt_ids(tok, r["problem"]) for r in chunk], max_new_tokens, tok.eos_token_id,
                      tok.pad_token_id, temperature=temperature, top_p=top_p, generator=gen)
        for r, o in zip(chunk, outs):
            text = tok.decode(o, skip_special_tokens=True)
            correct += T.is_correct(text, r["answer"])
            modes[T.classify(r["problem"], text)] += 1
            well += T.extract_boxed(text) is not None and text.rstrip().endswith("}")
    n = len(items)
    return {"acc": correct / n, "well_formed": well / n,
            "modes": {k: v / n for k, v in sorted(modes.items())}, "n": n, "temperature": temperature,
            "top_p": top_p}


@torch.no_grad()
def borrow_rate(model, tok, records: list[dict], samples: int = 2, seed: int = 4, batch: int = 256) -> dict:
    """Share of the borrow steps written in sampled (T = 1) chain responses that are computed right
    (task.borrow_steps), over ``records`` x ``samples``."""
    gen = torch.Generator().manual_seed(seed)
    items = [r for r in records for _ in range(samples)]
    right = written = 0
    for i in range(0, len(items), batch):
        chunk = items[i:i + batch]
        outs = sample(model, [prompt_ids(tok, r["problem"]) for r in chunk], 40, tok.eos_token_id,
                      tok.pad_token_id, temperature=1.0, top_p=1.0, generator=gen)
        for r, o in zip(chunk, outs):
            got = T.borrow_steps(r["problem"], tok.decode(o, skip_special_tokens=True))
            right, written = right + got[0], written + got[1]
    return {"rate": right / written if written else 0.0, "right": right, "written": written, "n": len(items)}


def run_checks(model, tok, splits: dict, task: T.TaskConfig) -> dict:
    val = splits["validation"]
    s = evaluate_model(model, tok, val, samples=4, temperature=1.0, seed=1)
    g = evaluate_model(model, tok, val, samples=1, temperature=0.0)
    p = evaluate_model(model, tok, val, samples=4, temperature=1.0, top_p=0.7, seed=2)
    tr = evaluate_model(model, tok, splits["train"][:256], samples=4, temperature=1.0, seed=3)
    chain = s["modes"].get("chain", 0) + s["modes"].get("correct_chain", 0)
    values = {
        "val_acc_T1": s["acc"],
        "chain_share_T1": chain,
        "shortcut_share_T1": s["modes"].get("shortcut", 0),
        "well_formed_T1": s["well_formed"],
        "greedy_acc": g["acc"],
    }
    evals = {"val_T1": s, "val_greedy": g, "val_T1_top_p0.7": p, "train256_T1": tr}
    bands = checks_of(task)
    if "borrow_rate_T1" in bands:
        b = borrow_rate(model, tok, splits.get("train_natural", splits["train"])[:1024])
        values["borrow_rate_T1"], evals["borrow_T1"] = b["rate"], b
    results = {k: {"value": round(values[k], 4), "range": list(bands[k]),
                   "ok": bands[k][0] <= values[k] <= bands[k][1]} for k in bands}
    return {"passed": all(r["ok"] for r in results.values()), "results": results, "eval": evals}


def _complete(out: Path) -> dict | None:
    wj = out / "world.json"
    if not wj.exists():
        return None
    try:
        world = json.loads(wj.read_text())
    except json.JSONDecodeError:
        return None
    needed = [out / "data" / f"{s}.jsonl" for s in ("train", "validation", "test")]
    needed += [out / "base_model" / "config.json", out / "base_model" / "tokenizer.json"]
    if not all(p.exists() for p in needed):
        return None
    return world


def shipped_world(h: str) -> Path | None:
    """The shipped copy of the world with config hash ``h`` (complete, same hash), or None."""
    d = SHIPPED_DIR / h
    w = _complete(d)
    return d if w is not None and w.get("config_hash") == h else None


def _publish(tmp: Path, out: Path, h: str) -> None:
    """Rename the finished world ``tmp`` to ``out``. A second process building the same world at the same time
    (two test sessions of one clone) may publish first: its complete world of the same config hash is kept and
    ``tmp`` removed; anything else there raises."""
    try:
        if out.exists() and not any(out.iterdir()):
            out.rmdir()
        tmp.rename(out)
    except OSError:
        other = _complete(out)
        if other is None or other.get("config_hash") != h:
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _stale_tmps(out: Path) -> list[Path]:
    """Build folders of ``out`` left by processes that are gone (``<name>.tmp<pid>``)."""
    stale = []
    for d in out.parent.glob(out.name + ".tmp*"):
        pid = d.name[len(out.name) + 4:]
        if not pid.isdigit():
            stale.append(d)       # the single .tmp of older versions
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.append(d)
        except OSError:
            pass                  # alive, another user's
    return stale


def build_world(out_dir, seed: int = 0, quick: bool = False, log=None, version: int = WORLD_VERSION,
                model: ModelConfig = MODEL, shipped: bool = True) -> Path:
    """Build (or reuse) the toy world of design ``version`` (WORLDS) with a model of shape ``model`` in
    ``out_dir``; returns its path. With ``shipped`` a shipped copy of the same config hash (SHIPPED_DIR) is
    copied instead of built. Raises WorldCheckError if the SFT base model fails the acceptance checks (not in
    quick mode)."""
    log = log or _print
    out = Path(out_dir)
    cfg = world_config(seed, quick, version, model)
    task, sft_cfg = WORLDS[version]
    h = T.config_hash(cfg)
    world = _complete(out)
    if world is not None and world.get("config_hash") == h:
        log(f"[toy] world {out} is complete (config {h}); nothing to do")
        return out
    if world is not None or (out.exists() and any(out.iterdir())):
        raise FileExistsError(f"{out} exists with a different or incomplete world; "
                              "remove it or use another --out")
    if out.is_symlink() and not out.exists():
        raise FileExistsError(f"{out} is a broken symlink (to {os.readlink(out)}); "
                              "remove it or use another --out")

    # a build folder of this process's own: two processes building one world never share one
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    for d in ([tmp] if tmp.exists() else []) + (_stale_tmps(out) if out.parent.exists() else []):
        shutil.rmtree(d, ignore_errors=True)
    src = shipped_world(h) if shipped else None
    if src is not None and src.resolve() != out.resolve():
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, tmp)
        _publish(tmp, out, h)
        log(f"[toy] world copied from the shipped {src} (config {h}; --rebuild builds it from scratch)")
        return out
    t0 = time.time()
    tmp.mkdir(parents=True)

    splits = T.make_splits(task, seed)
    for name, recs in splits.items():
        write_jsonl(tmp / "data" / f"{name}.jsonl", recs)
    stats = {k: T.split_stats(v) for k, v in splits.items()}
    log("[toy] splits: " + ", ".join(f"{k} n={v['n']} shortcut={v['shortcut_rate']:.3f} "
                                       f"chain_ceiling={v['chain_ceiling']:.3f}" for k, v in stats.items()))

    tok = build_tokenizer()
    model = build_model(tok, model, seed=seed)
    log(f"[toy] model: {type(model).__name__}, {n_params(model)} parameters")
    exclude = {r["problem"] for recs in splits.values() for r in recs}
    sft_stats = sft(model, tok, task, QUICK_SFT if quick else sft_cfg, seed=seed, exclude=exclude, log=log)

    checks = None
    if not quick:
        checks = run_checks(model, tok, splits, task)
        for k, r in checks["results"].items():
            log(f"[toy] check {k:20s} {r['value']:.3f} in {r['range']}: {'ok' if r['ok'] else 'FAILED'}")
        log(f"[toy] modes (val, T=1): {checks['eval']['val_T1']['modes']}")
        log(f"[toy] val acc T=1 top_p=0.7: {checks['eval']['val_T1_top_p0.7']['acc']:.3f}; "
            f"train acc T=1: {checks['eval']['train256_T1']['acc']:.3f}")

    model.save_pretrained(tmp / "base_model")
    tok.save_pretrained(tmp / "base_model")
    world = {
        "config": cfg,
        "config_hash": h,
        "n_params": n_params(model),
        "splits": stats,
        "sft": sft_stats,
        "checks": checks,
        "build_seconds": round(time.time() - t0, 1),
        "torch": torch.__version__,
    }
    (tmp / "world.json").write_text(json.dumps(world, indent=1))
    if checks is not None and not checks["passed"]:
        failed = [k for k, r in checks["results"].items() if not r["ok"]]
        raise WorldCheckError(f"toy base model failed acceptance checks {failed}; see {tmp / 'world.json'}")
    _publish(tmp, out, h)
    log(f"[toy] world built in {out} ({world['build_seconds']}s, config {h})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the world's folder (required unless --ship)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="seconds-long SFT, no acceptance checks")
    ap.add_argument("--version", type=int, default=WORLD_VERSION, choices=sorted(WORLDS),
                    help=f"the world design (default {WORLD_VERSION}; docs/toy_world.md)")
    ap.add_argument("--arch", choices=sorted(ARCHS), default=None,
                    help="a paper family's layout at toy width instead of the toy Qwen2 "
                         "(reproduce/toy/model.py ARCHS; with --quick: a CPU rehearsal's model)")
    ap.add_argument("--rebuild", action="store_true", help="build from scratch even where a copy is shipped")
    ap.add_argument("--ship", action="store_true", help=f"build from scratch into the shipped copy "
                                                        f"{SHIPPED_DIR}/<config hash>/")
    a = ap.parse_args(argv)
    if not a.ship and not a.out:
        ap.error("--out is required (or --ship)")
    model = ARCHS[a.arch] if a.arch else MODEL
    out = SHIPPED_DIR / T.config_hash(world_config(a.seed, a.quick, a.version, model)) if a.ship else a.out
    try:
        build_world(out, seed=a.seed, quick=a.quick, version=a.version, model=model,
                    shipped=not (a.rebuild or a.ship))
    except WorldCheckError as e:
        print(f"[toy] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

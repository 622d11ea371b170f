"""Sampling-speed benchmark of the HF engine's decoders on a model: the static KV cache with its compiled
kernel (`compute.fast: native`, common/fast/decode_kernel.py), the same with torch operations alone (`auto`),
and the model's own forward (`off`).

    python -m bench.decode [--world DIR] [--rows 32,64,128,256] [--new-tokens 48] [--reps 5] [--threads 1]

The decoders sample the same rows from the same prompts with the same seed (the same tokens up to float
rounding, tests/integration/test_rollout.py), interleaved rep by rep so that they see the same machine load;
the figure is the median wall time of a whole `generate` call, and per decode step (the call over its longest
response). Default model: the tiny world's base model (`runs/tiny/world`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORLD = ROOT / "runs" / "tiny" / "world"


def measure(model_dir: Path, prompts_file: Path, rows: list[int], new_tokens: int, reps: int,
            n: int = 8) -> list[dict]:
    from common import fast
    from common.models import load_model, load_tokenizer
    from common.rollout import SamplingParams
    from common.rollout.hf import HFEngine
    from common.yaml_config import ConfigError
    from common.sampling import encode_prompt

    tok = load_tokenizer(str(model_dir))
    model = load_model(str(model_dir), "float32", torch.device("cpu"))
    problems = [json.loads(line)["problem"]
                for line in prompts_file.read_text().splitlines()[: max(rows) // n + 1]]
    prompt_ids = [encode_prompt(tok, p, "plain") for p in problems]
    try:
        engines = {name: HFEngine(model, tok, fast=fast.choose(mode, "cpu", "float32"))
                   for name, mode in (("kernel", "native"), ("torch", "auto"), ("forward", "off"))}
    except ConfigError as e:
        raise SystemExit(f"bench.decode: {e}") from None
    out = []
    for r in rows:
        times, steps = {k: [] for k in engines}, []
        for rep in range(reps + 1):                       # rep 0 warms up
            params = SamplingParams(n=n, temperature=1.0, top_p=1.0, max_new_tokens=new_tokens, seed=rep)
            for name, eng in engines.items():
                t0 = time.perf_counter()
                got = eng.generate(prompt_ids[: r // n], params)
                if rep:
                    times[name].append(time.perf_counter() - t0)
                    steps.append(max(map(len, got.response_ids)))
        med = {k: statistics.median(v) for k, v in times.items()}
        step = statistics.median(steps)
        out.append({"rows": r, "steps": step, **{f"{k}_ms": 1e3 * v for k, v in med.items()},
                     "kernel_vs_torch": med["torch"] / med["kernel"],
                     "kernel_vs_forward": med["forward"] / med["kernel"]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__.split("\n")[0])
    ap.add_argument("--world", default=str(DEFAULT_WORLD),
                    help="toy world folder (base_model/, data/train.jsonl)")
    ap.add_argument("--rows", default="32,64,128,256", help="responses per generate call (n = 8 per prompt)")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    w = Path(a.world)
    if not (w / "base_model" / "config.json").is_file() or not (w / "data" / "train.jsonl").is_file():
        print(f"--world {str(w)!r}: expected base_model/ and data/train.jsonl (build one with: "
              "python -m reproduce.toy.build --out DIR)", file=sys.stderr)
        return 2
    try:
        rows = [int(x) for x in a.rows.split(",")]
    except ValueError:
        rows = []
    if not rows or any(r < 8 or r % 8 for r in rows) or a.reps < 1 or a.new_tokens < 1 or a.threads < 1:
        print(f"--rows {a.rows!r} must be multiples of 8; --reps, --new-tokens, --threads must be >= 1",
              file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    res = measure(w / "base_model", w / "data" / "train.jsonl", rows, a.new_tokens, a.reps)
    print(f"generate() median of {a.reps} (T = 1, top_p 1, {a.new_tokens} new tokens, "
          f"{a.threads} thread(s)); ms a call, and a decode step (the call / its longest response)")
    print(f"{'rows':>6} {'kernel ms':>10} {'/step':>6} {'torch ms':>9} {'/step':>6} {'forward ms':>11} "
          f"{'torch/kernel':>13} {'forward/kernel':>15}")
    for r in res:
        per = {k: r[f"{k}_ms"] / r["steps"] for k in ("kernel", "torch")}
        print(f"{r['rows']:>6} {r['kernel_ms']:>10.1f} {per['kernel']:>6.2f} {r['torch_ms']:>9.1f} "
              f"{per['torch']:>6.2f} {r['forward_ms']:>11.1f} {r['kernel_vs_torch']:>13.2f} "
              f"{r['kernel_vs_forward']:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

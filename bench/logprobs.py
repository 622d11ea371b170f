"""Peak memory of per-token log-probs, full-vocabulary vs chunked, with gradients (CPU).

    python -m bench.logprobs [--vocab 152064] [--hidden 256] [--lengths 2048,4096,8192] [--chunk 256]

Each measurement runs in a fresh subprocess: a [1, R, H] hidden-state leaf and a [V, H] lm_head (Qwen2.5's
vocabulary by default), log-probs of R sampled tokens (with entropy, as the trainer's first mini-batch
computes them), then backward of a per-token weighted sum. The figure is the process's peak resident memory
above what it held once the inputs existed (`ru_maxrss` minus the resident size before the computation): what
the log-prob computation itself adds. The full path is skipped, with the reason printed, where its estimate
(about 4 fp32 [R, V] copies) exceeds the memory available now.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _one(mode: str, length: int, vocab: int, hidden: int, chunk: int) -> dict:
    import torch

    from armor.policy import _token_logprobs, chunked_logprobs
    torch.manual_seed(0)
    torch.set_num_threads(1)
    head = torch.nn.Linear(hidden, vocab, bias=False)
    h = torch.randn(1, length, hidden, requires_grad=True)
    ids = torch.randint(0, vocab, (1, length))
    w = torch.randn(1, length)
    before = _rss_bytes()
    if mode == "full":
        logp, _ = _token_logprobs(head(h), ids, 1.0, True)
    else:
        logp, _ = chunked_logprobs(h, head, ids, 1.0, True, chunk)
    (logp * w).sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"mode": mode, "length": length, "extra_gib": max(0, peak - before) / 2 ** 30,
            "grad_norm": float(h.grad.norm())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.logprobs", description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lengths", default="2048,4096,8192")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--one", help=argparse.SUPPRESS)   # internal: "mode,length" -> one JSON line
    a = ap.parse_args(argv)
    if a.one:
        mode, length = a.one.split(",")
        print(json.dumps(_one(mode, int(length), a.vocab, a.hidden, a.chunk)))
        return
    print(f"per-token log-probs + entropy + backward, vocabulary {a.vocab}, hidden {a.hidden}, chunk "
          f"{a.chunk} tokens, 1 thread; extra peak resident memory (GiB) above the inputs")
    print(f"{'tokens':>7} {'full':>9} {'chunked':>9}  |grad| full / chunked")
    for length in map(int, a.lengths.split(",")):
        res = {}
        for mode in ("full", "chunked"):
            need = 4 * length * a.vocab * 4 if mode == "full" else 0
            if need and need * 1.1 > _available_bytes():
                res[mode] = (f"skipped: needs ~{need / 2 ** 30:.0f} GiB, "
                             f"{_available_bytes() / 2 ** 30:.0f} GiB free")
                continue
            out = subprocess.run([sys.executable, "-m", "bench.logprobs", "--one", f"{mode},{length}",
                                  "--vocab", str(a.vocab), "--hidden", str(a.hidden),
                                  "--chunk", str(a.chunk)],
                                 capture_output=True, text=True)
            res[mode] = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
                f"failed (rc {out.returncode}): {out.stderr.strip()[-200:]}"
        cell = lambda r: f"{r['extra_gib']:9.2f}" if isinstance(r, dict) else "        -"   # noqa: E731
        norms = " / ".join(f"{r['grad_norm']:.6g}" if isinstance(r, dict) else "-" for r in res.values())
        print(f"{length:>7} {cell(res['full'])} {cell(res['chunked'])}  {norms}", flush=True)
        for mode, r in res.items():
            if not isinstance(r, dict):
                print(f"        {mode}: {r}")


if __name__ == "__main__":
    main()

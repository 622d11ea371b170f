"""Where a training step's time goes, against the machine's own matrix speed for the same shapes.

    python -m bench.profile [--world DIR] [--steps N] [--warmup W] [--threads T] [--json FILE]

Runs bench.step_time's DAPO and ARMOR configurations (8 prompts x 8 responses, 48 new tokens, one optimizer
update a step; the world's base model, float32, CPU), one step of each in turn, and prints for every phase
(generate, log-probs, update) its median wall and CPU time, the FLOPs it computed, its achieved GFLOP/s (per
CPU second: on a shared machine wall time also counts other processes' turns), and beside it the GEMM limit:
the rate of the phase's own matrix products (every linear layer of the model at the phase's token count: the
forward product X·Wᵀ, and for the update also the backward products G·W and Gᵀ·X) timed alone in the same
process, right after each step, so that both see the same machine load. Then the same for
decoding: milliseconds and GFLOP/s a decode step (one token for every row) against the GEMM limit of one
step's products at that many rows.

FLOPs are counted from the model's shapes (`ModelShapes`, `forward_flops`, `decode_flops`) on the real tokens
only (padding is waste, not work): 2 per multiply-add of every linear layer ([q; k; v], o, gate, up, down),
the causal attention products Q·Kᵀ and P·V (a query at position i reads i + 1 keys), and the lm_head at the
positions whose logits are used; a backward pass counts twice its forward (the input and the weight
gradients). Norms, rotary, softmax and elementwise work are not counted: they are what the achieved rate
loses to. The counts come from the step's own batches (the trainer's calls are observed, not changed):
every generate call's prompts and responses, every no-grad log-prob pass (`Models.logprobs`) and every
update forward (`Models.policy_forward`). The lean forward (common.fast.lean_forward) computes a prompt that
several rows of a micro-batch answer once: the table counts the update as the model's forward defines it (the
target's figure), the line under it as computed (each group's shared prompt once, its GEMM limit timed at
the computed token count).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from bench import step_time

PHASES = ("generate", "logprob", "update")
TARGET_UPDATE_SHARE = 0.5        # the update at >= 50 % of the GEMM limit
TARGET_DECODE_MS = 1.0           # a decode step of 64 rows in <= 1 ms


# ------------------------------------------------------------------------------------------ FLOP counts
@dataclass(frozen=True)
class ModelShapes:
    """The shapes a decoder-only transformer's FLOPs follow from (read from an HF config by `of`)."""
    hidden: int
    intermediate: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config) -> "ModelShapes":
        heads = config.num_attention_heads
        d = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(config.hidden_size, config.intermediate_size, config.num_hidden_layers, heads,
                   getattr(config, "num_key_value_heads", None) or heads, d, config.vocab_size)

    @property
    def linear_params(self) -> int:
        """Weights of the linear layers of all decoder layers: L · (H·(hq + 2·hkv)·d + hq·d·H + 3·H·I)."""
        H, d = self.hidden, self.head_dim
        per_layer = (H * (self.q_heads + 2 * self.kv_heads) * d + self.q_heads * d * H
                     + 3 * H * self.intermediate)
        return self.layers * per_layer

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer of the decoder layers, in order."""
        H, d, I = self.hidden, self.head_dim, self.intermediate
        one = [(H, (self.q_heads + 2 * self.kv_heads) * d), (self.q_heads * d, H), (H, I), (H, I), (I, H)]
        return one * self.layers


def forward_flops(s: ModelShapes, seq_lens: list[int], logit_positions: int, shared: int = 0) -> dict:
    """FLOPs of one forward pass over sequences of the given real lengths.

    linear = 2 · (Σ_n len_n − shared) · linear_params;
    attention = Σ_n Σ_{i<len_n} 4 · (i + 1) · hq · d · L = Σ_n 2 · len_n · (len_n + 1) · hq · d · L (Q·Kᵀ and
    P·V, causal);  lm_head = 2 · H · V · logit_positions. shared: tokens whose states another row computes
    already (a prompt several rows answer, computed once by common.fast.lean_forward; 0 counts the model's own
    forward). Returns {"linear", "attention", "lm_head", "total"}."""
    tokens = sum(seq_lens) - shared
    out = {"linear": 2 * tokens * s.linear_params,
           "attention": sum(2 * n * (n + 1) for n in seq_lens) * s.q_heads * s.head_dim * s.layers,
           "lm_head": 2 * s.hidden * s.vocab * logit_positions}
    out["total"] = sum(out.values())
    return out


def decode_flops(s: ModelShapes, contexts: list[int]) -> dict:
    """FLOPs of one decode step: one new token for each row, row j attending to contexts[j] keys (its prompt,
    its tokens so far and the new one).

    linear = 2 · rows · linear_params;  attention = Σ_j 4 · c_j · hq · d · L;  lm_head = 2 · rows · H · V."""
    rows = len(contexts)
    out = {"linear": 2 * rows * s.linear_params,
           "attention": 4 * sum(contexts) * s.q_heads * s.head_dim * s.layers,
           "lm_head": 2 * rows * s.hidden * s.vocab}
    out["total"] = sum(out.values())
    return out


def rollout_flops(s: ModelShapes, prompt_lens: list[int], response_lens: list[int], n: int) -> dict:
    """FLOPs of one generate call: each distinct prompt prefilled once (its last position's logits), then
    every response token after the first decoded: token t >= 1 of a row comes from the decode step that
    writes token t - 1, whose query attends to prompt + t keys.
    prompt_lens: [P] distinct prompts; response_lens: [P·n] prompt-major. Returns forward_flops' keys and
    "decode_steps": the call's number of decode steps (its longest response, less one)."""
    pre = forward_flops(s, prompt_lens, len(prompt_lens))
    contexts = [prompt_lens[j // n] + t for j, r in enumerate(response_lens) for t in range(1, r)]
    dec = decode_flops(s, contexts)
    out = {k: pre[k] + dec[k] for k in pre}
    out["decode_steps"] = max(0, max(response_lens, default=0) - 1)
    return out


# ---------------------------------------------------------------------------------------- GEMM limit
def gemm_time(s: ModelShapes, tokens: int, backward: bool, reps: int = 3) -> tuple[float, int]:
    """CPU seconds (the best of `reps`) and FLOPs of the model's linear-layer products at `tokens` rows alone:
    X·Wᵀ for each, and with `backward` also G·W and Gᵀ·X (fresh operands, float32, the current threads)."""
    g = torch.Generator().manual_seed(0)
    shapes = s.linears()
    xs = {i: torch.randn(tokens, i, generator=g) for i in {i for i, _ in shapes}}
    gs = {o: torch.randn(tokens, o, generator=g) for o in {o for _, o in shapes}}
    ws = [torch.randn(o, i, generator=g) for i, o in shapes]
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        for (i, o), w in zip(shapes, ws):
            torch.mm(xs[i], w.t())
            if backward:
                torch.mm(gs[o], w)
                torch.mm(gs[o].t(), xs[i])
        best = min(best, time.process_time() - t0)
    flops = sum(2 * tokens * i * o for i, o in shapes) * (3 if backward else 1)
    return max(best, 1e-9), flops


# ----------------------------------------------------------------------------------------- observing
class _Recorder:
    """Observes one trainer's model calls (their batches' real lengths) and the CPU time of its phases
    (generate calls, `_frozen_logprobs`, `_optimize`), without changing what they do."""

    def __init__(self, trainer):
        self.calls: dict[str, list] = {"generate": [], "logprob": [], "update": []}
        self.cpu = dict.fromkeys(PHASES, 0.0)
        models = trainer.models
        gen, lps, fwd = models.generate, models.logprobs, models.policy_forward

        def generate(which, prompts, params):
            ro = self._timed("generate", gen, which, prompts, params)
            self.calls["generate"].append(([len(p) for p in prompts], [len(r) for r in ro.response_ids],
                                           params.n))
            return ro

        def logprobs(which, batch, rows, *a, **kw):
            self.calls["logprob"].append(_lengths(batch, rows))
            return lps(which, batch, rows, *a, **kw)

        def policy_forward(batch, rows, *a, **kw):
            self.calls["update"].append(_lengths(batch, rows))
            return fwd(batch, rows, *a, **kw)
        models.generate, models.logprobs, models.policy_forward = generate, logprobs, policy_forward
        frozen, optimize = trainer._frozen_logprobs, trainer._optimize
        trainer._frozen_logprobs = lambda *a, **kw: self._timed("logprob", frozen, *a, **kw)
        trainer._optimize = lambda *a, **kw: self._timed("update", optimize, *a, **kw)

    def _timed(self, phase: str, fn, *a, **kw):
        c0 = time.process_time()
        try:
            return fn(*a, **kw)
        finally:
            self.cpu[phase] += time.process_time() - c0

    def take(self) -> tuple[dict, dict]:
        out, cpu = self.calls, self.cpu
        self.calls, self.cpu = {k: [] for k in self.calls}, dict.fromkeys(PHASES, 0.0)
        return out, cpu


def _lengths(batch, rows) -> tuple[list[int], int, int]:
    """(real length of each row, response tokens, prompt tokens of rows whose prompt an earlier row of `rows`
    has: the shared tokens) of `rows` of a TokenBatch."""
    r = rows.cpu()
    P = batch.prompt_len
    prompts = [tuple(x) for x in batch.input_ids.cpu()[r, :P].tolist()]
    plens = batch.attention_mask.cpu()[r, :P].sum(-1).tolist()
    seen, shared = set(), 0
    for p, n in zip(prompts, plens):
        shared += n if p in seen else 0
        seen.add(p)
    return batch.seq_lens.cpu()[r].tolist(), int(batch.response_mask.cpu()[r].sum()), shared


def step_flops(s: ModelShapes, calls: dict) -> dict:
    """A step's FLOPs per phase from its observed calls, with the token counts the GEMM limit is timed at."""
    gen = [rollout_flops(s, p, r, n) for p, r, n in calls["generate"]]
    lp = [forward_flops(s, lens, resp) for lens, resp, _ in calls["logprob"] if resp]
    up = [forward_flops(s, lens, resp) for lens, resp, _ in calls["update"]]
    up_once = [forward_flops(s, lens, resp, shared) for lens, resp, shared in calls["update"]]
    return {"generate": sum(f["total"] for f in gen), "logprob": sum(f["total"] for f in lp),
            "update": 3 * sum(f["total"] for f in up),
            "update_computed": 3 * sum(f["total"] for f in up_once),
            "decode_steps": sum(f["decode_steps"] for f in gen),
            "decode_rows": max((len(r) for _, r, _ in calls["generate"]), default=0),
            "update_tokens": sum(sum(lens) for lens, _, _ in calls["update"]),
            "update_computed_tokens": sum(sum(lens) - sh for lens, _, sh in calls["update"]),
            "logprob_tokens": sum(sum(lens) for lens, resp, _ in calls["logprob"] if resp)}


# -------------------------------------------------------------------------------------------- running
def run(world=None, steps: int = 10, warmup: int = 2, threads: int = 1, *, prompts: int = step_time.PROMPTS,
        group: int = step_time.GROUP, max_new_tokens: int = step_time.MAX_NEW_TOKENS, log=None,
        fast: str = step_time.FAST) -> dict:
    """Profile DAPO and ARMOR steps (interleaved) and the GEMM limits; returns the figures (format_report)."""
    if steps < 1 or warmup < 0 or threads < 1:
        raise ValueError("need --steps >= 1, --warmup >= 0, --threads >= 1")
    log = log or (lambda msg: None)
    os.environ.setdefault("ARMOR_PROGRESS", "0")
    torch.set_num_threads(threads)
    w = step_time.ensure_world(world)
    from transformers import AutoConfig
    shapes = ModelShapes.of(AutoConfig.from_pretrained(str(w / "base_model")))
    from common.fast import lean_forward
    res = {"config": {"world": str(w), "steps": steps, "warmup": warmup, "threads": threads,
                      "prompts": prompts, "group": group, "max_new_tokens": max_new_tokens,
                      "shapes": shapes.__dict__, "fast": fast},
           "versions": step_time.versions(), "load_before": step_time.load_average()}
    rows: dict[str, list] = {"dapo": [], "armor": []}
    with tempfile.TemporaryDirectory(prefix="armor-profile-") as tmp:
        arms = {a: step_time.OurArm(step_time.run_config(w, Path(tmp) / a, a, threads=threads,
                                                         total_steps=warmup + steps, prompts=prompts,
                                                         group=group, max_new_tokens=max_new_tokens,
                                                         fast=fast))
                for a in rows}
        recorders = {a: _Recorder(arm.trainer) for a, arm in arms.items()}
        paths = arms["dapo"].trainer.fast
        res["config"]["fast_forward_used"] = (paths.lean_forward
                                              and lean_forward.supports(arms["dapo"].trainer.models.policy))
        res["config"]["decode_kernel"] = paths.describe()
        try:
            log(f"[profile] DAPO, ARMOR interleaved: {warmup} + {steps} steps each")
            for i in range(warmup + steps):
                for name, arm in arms.items():
                    c0 = time.process_time()
                    row = arm.step()
                    cpu = time.process_time() - c0
                    calls, phase_cpu = recorders[name].take()
                    fl = step_flops(shapes, calls)
                    # the GEMM limits at this step's sizes, measured now (the same machine load)
                    lim = {"update": gemm_time(shapes, max(1, fl["update_tokens"]), True),
                           "update_computed": gemm_time(shapes, max(1, fl["update_computed_tokens"]), True),
                           "logprob": gemm_time(shapes, max(1, fl["logprob_tokens"]), False),
                           "decode": gemm_time(shapes, max(1, fl["decode_rows"]), False, reps=20)}
                    if i >= warmup:
                        rows[name].append({"row": row, "cpu_s": cpu, "phase_cpu": phase_cpu, "flops": fl,
                                           "limit": {k: v[1] / v[0] for k, v in lim.items()}})
        finally:
            for arm in arms.values():
                arm.close()
    for name, rs in rows.items():
        res[name] = summarize(rs)
    res["load_after"] = step_time.load_average()
    return res


def summarize(rs: list[dict]) -> dict:
    """Medians over the measured steps of each phase's wall and CPU ms, GFLOP, achieved GFLOP/s (per CPU
    second: a shared machine's preemption is not the code's), GEMM limit and share of it."""
    med = statistics.median
    out = {"steps": len(rs), "step_ms": 1e3 * med(r["row"]["time_step"] for r in rs),
           "step_cpu_ms": 1e3 * med(r["cpu_s"] for r in rs), "phases": {}}
    limit_of = {"generate": "decode", "logprob": "logprob", "update": "update"}
    for ph in PHASES:
        cpu = [r["phase_cpu"][ph] for r in rs]
        fl = [r["flops"][ph] for r in rs]
        rate = [f / x / 1e9 if x > 0 and f else 0.0 for f, x in zip(fl, cpu)]
        lim = [r["limit"][limit_of[ph]] / 1e9 for r in rs]
        out["phases"][ph] = {"ms": 1e3 * med(r["row"][f"time_{ph}"] for r in rs), "cpu_ms": 1e3 * med(cpu),
                             "gflop": med(fl) / 1e9, "gflops": med(rate), "limit_gflops": med(lim),
                             "share": med(a / b if b else 0.0 for a, b in zip(rate, lim))}
    # the update counting what the lean forward computes: a prompt several rows answer, once
    cpu = [r["phase_cpu"]["update"] for r in rs]
    fl = [r["flops"]["update_computed"] for r in rs]
    rate = [f / x / 1e9 if x > 0 and f else 0.0 for f, x in zip(fl, cpu)]
    lim = [r["limit"]["update_computed"] / 1e9 for r in rs]
    out["update_computed"] = {"gflop": med(fl) / 1e9, "gflops": med(rate), "limit_gflops": med(lim),
                              "share": med(a / b if b else 0.0 for a, b in zip(rate, lim))}
    per = [r["phase_cpu"]["generate"] / r["flops"]["decode_steps"] for r in rs if r["flops"]["decode_steps"]]
    out["decode"] = {"rows": med(r["flops"]["decode_rows"] for r in rs),
                     "ms_per_step": 1e3 * med(per) if per else float("nan"),
                     "gflops": out["phases"]["generate"]["gflops"],
                     "limit_gflops": med(r["limit"]["decode"] / 1e9 for r in rs)}
    return out


def format_report(res: dict) -> str:
    c = res["config"]
    L = [f"bench.profile: {c['prompts']} prompts x {c['group']} responses, max_new_tokens "
         f"{c['max_new_tokens']}, "
         f"float32, CPU threads {c['threads']}; medians over {c['steps']} steps after {c['warmup']} warm-up "
         f"(each arm in turn)",
         f"  world {c['world']}; model {c['shapes']}",
         f"  compute.fast {c.get('fast', '?')}: lean forward "
         f"{'on' if c.get('fast_forward_used') else 'off'}; "
         f"decode steps {c.get('decode_kernel', '?')}; versions: "
         + ", ".join(f"{k} {v}" for k, v in res["versions"].items()),
         f"  load average before {res['load_before']}, after {res['load_after']}",
         "  GFLOP/s = FLOPs counted from the shapes / the phase's CPU time; GEMM lim = the phase's "
         "linear-layer products alone (CPU time, best of a few), timed after each step", ""]
    L.append(f"{'arm':6} {'phase':9} {'wall ms':>8} {'CPU ms':>8} {'GFLOP':>8} {'GFLOP/s':>8} "
             f"{'GEMM lim':>9} "
             f"{'share':>6}")
    for arm in ("dapo", "armor"):
        a = res[arm]
        for ph in PHASES:
            p = a["phases"][ph]
            rates = (f"{p['gflops']:8.1f} {p['limit_gflops']:9.1f} {100 * p['share']:5.0f}%" if p["gflop"]
                     else f"{'-':>8} {'-':>9} {'-':>6}")       # a phase that computed nothing (DAPO's πref)
            L.append(f"{arm.upper():6} {ph:9} {p['ms']:8.1f} {p['cpu_ms']:8.1f} {p['gflop']:8.3f} {rates}")
        L.append(f"{arm.upper():6} {'step':9} {a['step_ms']:8.1f} {a['step_cpu_ms']:8.1f}")
    d = res["dapo"]["decode"]
    L.append("")
    L.append(f"decode (DAPO's generate CPU time, prefill and sampling included): {d['rows']:.0f} rows, "
             f"{d['ms_per_step']:.3f} ms a step (one token a row; target <= {TARGET_DECODE_MS} ms: "
             f"{'met' if d['ms_per_step'] <= TARGET_DECODE_MS else 'MISSED'}), {d['gflops']:.2f} GFLOP/s "
             f"against a GEMM limit of {d['limit_gflops']:.1f} GFLOP/s at {d['rows']:.0f} rows")
    share = res["dapo"]["phases"]["update"]["share"]
    L.append(f"DAPO update at {100 * share:.0f}% of its GEMM limit "
             f"(target >= {100 * TARGET_UPDATE_SHARE:.0f}%: "
             f"{'met' if share >= TARGET_UPDATE_SHARE else 'MISSED'})")
    u = res["dapo"].get("update_computed")
    if u:
        L.append(f"  counting only the FLOPs computed (a group's shared prompt once): {u['gflop']:.3f} "
                 f"GFLOP, {u['gflops']:.1f} GFLOP/s, {100 * u['share']:.0f}% of a GEMM limit of "
                 f"{u['limit_gflops']:.1f} at the computed tokens")
    L.append(f"ARMOR / DAPO step time: {res['armor']['step_ms'] / res['dapo']['step_ms']:.2f}")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n")[0])
    ap.add_argument("--world", default=None, help="toy world folder (default: the quick world, built once)")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per arm (median)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps per arm")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--fast", choices=["auto", "off", "native"], default=step_time.FAST,
                    help=f"the arms' compute.fast (default {step_time.FAST}, as the tiny presets)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    a = ap.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        res = run(a.world, a.steps, a.warmup, a.threads, log=lambda m: print(m, file=sys.stderr, flush=True),
                  fast=a.fast)
    except (ValueError, FileNotFoundError) as e:
        print(f"bench.profile: {e}", file=sys.stderr)
        return 2
    print(format_report(res), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

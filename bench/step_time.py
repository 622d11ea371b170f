"""Step-time benchmark on the tiny world: our trainer (DAPO, ARMOR) against TRL's GRPOTrainer.

    python -m bench.step_time [--world DIR] [--steps N] [--warmup W] [--threads T] [--skip-trl] [--json FILE]

One configuration for all three contenders (CPU, float32, the world's base_model): 8 prompts x 8 responses per
step, at most 48 new tokens, temperature 1 / top_p 1, one optimizer update per step (one pass, one
mini-batch), binary +1/-1 reward from grading \\boxed{} against the gold answer.

- DAPO: our Trainer, plain ratio, clip-higher + dual-clip, dynamic sampling OFF (every step does the same
  work), no KL-to-πref monitor (algo.reference.kl_monitor=false: TRL at beta 0 has no reference model either).
- ARMOR: our Trainer, Anchor Rollout (7 on-policy + 1 anchor, ref_n = 4 reference samples for the prompts that
  pass the on-policy filter) and the mixed ratio with alpha = 0.875. One generation round per step (the same 8
  prompts as DAPO draws), so a prompt that fails the keep rule is dropped rather than replaced.
- TRL: GRPOTrainer with the same batch (per_device_train_batch_size = 64, num_generations = 8, generation
  batch = one step), loss_type "dapo", beta 0, no vLLM, logging off; step time measured by a TrainerCallback.

The contenders run interleaved (a TRL step, then a DAPO step, then an ARMOR step, and again), so that on a
shared machine they see the same load. The CLI sets OMP_WAIT_POLICY=PASSIVE unless the environment gives a
value: libgomp's default spin-waiting makes 2 threads several times slower than 1 when other processes load
the CPU. Figures are medians over N steps after W warm-up steps. The trainer's own metrics row supplies our
phase times (time_generate / time_score / time_logprob / time_update / time_step). tok/s: generate, score and
total divide the tokens sampled in the step; log-probs and update divide the response tokens of the update
batch.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and "torch" not in sys.modules:
    # libgomp's default spin-waiting makes 2 threads several times slower than 1 on a shared, loaded CPU.
    # It must be set before torch loads OpenMP; a value given in the environment wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORLD = ROOT / "runs" / "_cache" / "world_quick"

# the shared configuration (the CLI exposes only steps / warm-up / threads; the smoke test shrinks the rest)
PROMPTS = 8
GROUP = 8
MAX_NEW_TOKENS = 48
TEMPERATURE = 1.0
LR = 1e-6
REF_N = 4
ALPHA = 0.875
SEED = 0
TARGET_ARMOR_OVER_DAPO = 1.25       # issue 36: while doing the paper's extra work
TARGET_DAPO_OVER_TRL = 0.35         # issue 36, on identical work
PHASES = ("generate", "score", "logprob", "update", "total")


# ------------------------------------------------------------------------------------------------ world
def ensure_world(world: str | Path | None) -> Path:
    """The given world folder, or the quick tiny world built (once) into the repo's cache."""
    if world is not None:
        w = Path(world)
        if not (w / "base_model" / "config.json").is_file() or not (w / "data" / "train.jsonl").is_file():
            raise FileNotFoundError(f"--world {str(w)!r}: expected base_model/ and data/train.jsonl "
                                    "(build one with: python -m reproduce.toy.build --out DIR)")
        return w
    from reproduce.toy.build import build_world
    return Path(build_world(DEFAULT_WORLD, seed=0, quick=True, log=lambda *a, **k: None))


# ------------------------------------------------------------------------------------------- our side
FAST = "native"     # our arms' compute.fast by default: the tiny presets' (reproduce/presets/tiny.yaml)


def run_config(world: Path, out_dir: Path, arm: str, *, threads: int, total_steps: int,
               prompts: int = PROMPTS, group: int = GROUP, max_new_tokens: int = MAX_NEW_TOKENS,
               fast: str = FAST):
    """The RunConfig of one arm ("dapo" | "armor") of the benchmark; fast: its compute.fast."""
    from armor.config import from_dict
    if arm not in ("dapo", "armor"):
        raise ValueError(f"unknown arm {arm!r}")
    armor = arm == "armor"
    data = {
        "name": f"bench-{arm}", "seed": SEED, "output_dir": str(out_dir), "device": "cpu", "threads": threads,
        "model": {"path": str(world / "base_model"), "dtype": "float32"},
        "data": {"train": str(world / "data" / "train.jsonl"), "prompt_template": "plain"},
        "rollout": {"engine": "hf", "temperature": TEMPERATURE, "top_p": 1.0, "gen_batch_prompts": prompts,
                    "max_rounds": 1, "on_shortfall": "proceed"},
        "lengths": {"max_prompt": 64, "max_response": max_new_tokens, "overlong_buffer": 0},
        "batch": {"prompts_per_step": prompts, "group_size": group, "mini_batch_prompts": prompts,
                  "epochs": 1, "micro_batch_responses": prompts * group},
        "algo": {"advantage": "grpo", "loss_agg": "token-mean", "dynamic_sampling": False,
                 "clip": {"eps_low": 0.2, "eps_high": 0.28, "dual_clip_c": 10.0},
                 "anchor": {"enabled": armor, "ref_n": REF_N, "lazy": True},
                 "mix": {"variant": "mixed" if armor else "plain", "alpha": ALPHA if armor else 1.0},
                 # like TRL at beta 0, no KL monitor: DAPO never reads πref; ARMOR's mixed ratio still does
                 "reference": {"kl_monitor": False}},
        "optim": {"lr": LR, "warmup_steps": 0, "weight_decay": 0.0, "grad_clip": 1.0},
        "reward": {"answer_mode": "boxed", "grader_workers": 0},
        "schedule": {"total_steps": total_steps, "save_every": 10 ** 6, "validate_every": 0},
        "validation": {"at_start": False},
        "compute": {"fast": fast},
    }
    return from_dict(data)


class OurArm:
    """One of our contenders: a Trainer stepped with train_step only (no validation, no checkpoint)."""

    def __init__(self, cfg):
        from armor.trainer import Trainer

        class _Counting(Trainer):   # counts the response tokens of the update batch; behaviour unchanged
            def update(self, groups, tm):
                self._trained_tokens = sum(len(r) for g in groups for r in g.responses)
                return super().update(groups, tm)

        self.trainer = _Counting(cfg).start()
        self.rows: list[dict] = []

    def step(self) -> dict:
        tr = self.trainer
        tr._trained_tokens = 0
        row = tr.train_step()
        row["tokens_trained"] = tr._trained_tokens
        row["threads_seen"] = torch.get_num_threads()
        self.rows.append(row)
        return row

    def close(self) -> None:
        self.trainer.grader.close()


def summarize_ours(rows: list[dict]) -> dict:
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    s = {"generate": med("time_generate"), "score": med("time_score"), "logprob": med("time_logprob"),
         "update": med("time_update"), "total": med("time_step"),
         "tokens_generated": med("tokens_generated"), "tokens_trained": med("tokens_trained"),
         "prompts_kept": med("prompts_kept"), "ref_samples": med("ref_samples"), "anchors": med("anchors"),
         "accuracy": statistics.mean(r["accuracy"] for r in rows),
         "response_length": statistics.mean(r["response_length"] for r in rows), "steps": len(rows)}
    # tok/s of the medians of each step's own rate
    rate = lambda tok, t: statistics.median(r[tok] / r[t] if r[t] > 0 else 0.0 for r in rows)  # noqa: E731
    s["tps"] = {"generate": rate("tokens_generated", "time_generate"),
                "score": rate("tokens_generated", "time_score"),
                "logprob": rate("tokens_trained", "time_logprob"),
                "update": rate("tokens_trained", "time_update"),
                "total": rate("tokens_generated", "time_step")}
    return s


# ------------------------------------------------------------------------------------------------- TRL
def trl_version() -> str | None:
    try:
        import trl
    except ImportError:
        return None
    return trl.__version__


def run_trl(world: Path, out_dir: Path, *, threads: int, steps: int, warmup: int, prompts: int = PROMPTS,
            group: int = GROUP, max_new_tokens: int = MAX_NEW_TOKENS, between_steps=None) -> dict:
    """The same step with TRL's GRPOTrainer; time per optimizer step from on_step_begin to on_step_end.

    between_steps(): called after each TRL step, outside its timing (the benchmark runs our steps there, so
    that all contenders share the same moments of a shared machine's load)."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from armor.data import load_prompts
    from common.models import load_model, load_tokenizer
    from common.benchmarks import build_messages
    from common.grading import Grader

    torch.manual_seed(SEED)
    tok = load_tokenizer(str(world / "base_model"))
    model = load_model(str(world / "base_model"), "float32", "cpu")
    prompts_all = load_prompts(str(world / "data" / "train.jsonl"), "problem", "answer")
    ds = Dataset.from_list([{"prompt": build_messages(p.problem, "plain"), "answer": p.answer}
                            for p in prompts_all])
    grader = Grader(num_workers=0, mode="boxed")

    def boxed_reward(prompts, completions, answer, **kw):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [1.0 if v.correct else -1.0 for v in grader.grade(texts, list(answer), "math")]

    timing = {"step": [], "generate": [], "score": [], "tokens": [], "threads": []}

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            torch.set_num_threads(threads)

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()
            timing["threads"].append(torch.get_num_threads())
            timing["generate"].append(0.0)
            timing["score"].append(0.0)
            timing["tokens"].append(0)

        def on_step_end(self, args, state, control, **kw):
            timing["step"].append(time.perf_counter() - self.t0)
            if between_steps is not None:
                between_steps()
                torch.set_num_threads(threads)

    class TimedGRPO(GRPOTrainer):   # phase times only; behaviour unchanged
        def _generate_single_turn(self, *a, **kw):
            t0 = time.perf_counter()
            out = super()._generate_single_turn(*a, **kw)
            if timing["generate"]:
                timing["generate"][-1] += time.perf_counter() - t0
                timing["tokens"][-1] += sum(len(c) for c in out[0])
            return out

        def _calculate_rewards(self, *a, **kw):
            t0 = time.perf_counter()
            out = super()._calculate_rewards(*a, **kw)
            if timing["score"]:
                timing["score"][-1] += time.perf_counter() - t0
            return out

    n = prompts * group
    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        seed=SEED, per_device_train_batch_size=n, gradient_accumulation_steps=1, num_generations=group,
        steps_per_generation=1, num_iterations=1, max_steps=warmup + steps,
        max_completion_length=max_new_tokens,
        temperature=TEMPERATURE, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", scale_rewards="group",
        epsilon=0.2, epsilon_high=0.28, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, use_vllm=False, report_to="none", logging_strategy="no",
        save_strategy="no", eval_strategy="no", log_completions=False, disable_tqdm=True,
        dataloader_num_workers=0, remove_unused_columns=False)
    torch.set_num_threads(threads)
    trainer = TimedGRPO(model=model, reward_funcs=boxed_reward, args=args, train_dataset=ds,
                        processing_class=tok, callbacks=[Timer()])
    trainer.remove_callback(PrinterCallback)   # logging off: no end-of-training metrics dict on stdout
    try:
        trainer.train()
    finally:
        grader.close()
    cut = slice(warmup, None)
    step, gen, sc, toks = (timing[k][cut] for k in ("step", "generate", "score", "tokens"))
    if not step:
        raise RuntimeError(f"TRL ran {len(timing['step'])} steps, fewer than warm-up {warmup} + 1")
    med = statistics.median
    return {"total": med(step), "generate": med(gen), "score": med(sc),
            "rest": med(s - g - c for s, g, c in zip(step, gen, sc)), "tokens_generated": med(toks),
            "tps": {"generate": med(t / g if g else 0.0 for t, g in zip(toks, gen)),
                    "total": med(t / s for t, s in zip(toks, step))},
            "steps": len(step), "optimizer_steps": trainer.state.global_step,
            "threads_seen": max(timing["threads"])}


# --------------------------------------------------------------------------------------------- report
def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def versions() -> dict:
    import transformers
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": trl_version() or "not installed"}


def _f(x, fmt: str = "9.1f", scale: float = 1.0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return format("-", ">" + fmt.split(".")[0])
    if fmt.endswith(".0f") and x >= 1e5:   # rates of near-instant phases (grading): 1.2M, not 1234567
        return format(f"{x / 1e6:.1f}M", ">" + fmt.split(".")[0])
    return format(scale * x, fmt)


def format_report(res: dict) -> str:
    c, v = res["config"], res["versions"]
    d, a, t = res["dapo"], res["armor"], res.get("trl")
    has_trl = isinstance(t, dict)
    L = [f"bench.step_time: {c['prompts']} prompts x {c['group']} responses/step, max_new_tokens "
         f"{c['max_new_tokens']}, T={c['temperature']} top_p=1, 1 optimizer update/step, float32, CPU, torch "
         f"threads {c['threads']}; medians over {c['steps']} steps after {c['warmup']} warm-up",
         f"  world {c['world']} (base_model: {c['n_params']} parameters); our arms' compute.fast "
         f"{c.get('fast', '?')}",
         "  DAPO : our Trainer, plain ratio, clip [0.8, 1.28] + dual-clip 10, token-mean, "
         "dynamic sampling off",
         f"  ARMOR: our Trainer, anchors on ({c['group'] - 1} on-policy + 1 anchor; ref_n {REF_N} reference "
         f"samples for the prompts passing the on-policy filter), mixed ratio alpha {ALPHA}, one round/step",
         f"  TRL  : GRPOTrainer, per_device_train_batch_size {c['prompts'] * c['group']}, num_generations "
         f"{c['group']}, steps_per_generation 1, loss_type dapo, epsilon 0.2/0.28, beta 0, "
         f"scale_rewards group, "
         "no vLLM, same grader",
         "  versions: " + ", ".join(f"{k} {x}" for k, x in v.items()),
         f"  OMP_WAIT_POLICY={c['omp_wait_policy']}; load average (1/5/15 min): before {res['load_before']}, "
         f"after {res['load_after']} ({c['cpus']} CPUs)",
         "",
         f"{'phase':<9}{'DAPO ms':>10}{'tok/s':>8}{'ARMOR ms':>10}{'tok/s':>8}{'ARMOR/DAPO':>11}"
         + (f"{'TRL ms':>10}{'tok/s':>8}{'DAPO/TRL':>9}" if has_trl else "")]
    trl_ph = {"generate": "generate", "score": "score", "logprob": None, "update": "rest", "total": "total"}
    for ph in PHASES:
        ratio = a[ph] / d[ph] if d[ph] > 0 else float("nan")
        line = (f"{ph:<9}{_f(d[ph], '10.1f', 1e3)}{_f(d['tps'][ph], '8.0f')}{_f(a[ph], '10.1f', 1e3)}"
                f"{_f(a['tps'][ph], '8.0f')}{_f(ratio, '11.2f')}")
        if has_trl:
            k = trl_ph[ph]
            tv = t[k] if k else None
            line += (f"{_f(tv, '10.1f', 1e3):>10}{_f(t['tps'].get(ph), '8.0f'):>8}"
                     f"{_f(d[ph] / tv if tv else None, '9.2f'):>9}")
        L.append(line)
    L.append(f"per step: DAPO  {d['tokens_generated']:.0f} tokens sampled, {d['tokens_trained']:.0f} "
             f"trained, {d['prompts_kept']:.0f} prompts kept, accuracy {d['accuracy']:.3f}")
    L.append(f"          ARMOR {a['tokens_generated']:.0f} tokens sampled (incl. references), "
             f"{a['tokens_trained']:.0f} trained, {a['prompts_kept']:.0f} prompts kept, "
             f"{a['ref_samples']:.0f} reference samples, accuracy {a['accuracy']:.3f}")
    if has_trl:
        L.append(f"          TRL   {t['tokens_generated']:.0f} tokens sampled, {t['optimizer_steps']} "
                 f"optimizer steps in all; TRL's 'update' row = step - generate - reward (its one "
                 f"forward/backward, optimizer, bookkeeping); it computes no separate log-probs "
                 f"(num_iterations 1, beta 0)")
    if a["prompts_kept"] == 0:
        L.append("note: ARMOR kept no prompt (no correct on-policy/reference sample): its log-prob and "
                 "update phases did no work; use a trained world (--world runs/tiny/world)")
    r1 = a["total"] / d["total"]
    L.append(f"ARMOR / DAPO step time: {r1:.2f} (target <= {TARGET_ARMOR_OVER_DAPO}: "
             f"{'met' if r1 <= TARGET_ARMOR_OVER_DAPO else 'MISSED'}); rollout (generate + score) "
             f"{(a['generate'] + a['score']) / (d['generate'] + d['score']):.2f}")
    if 0 < a["prompts_kept"] < d["prompts_kept"]:
        est = a["total"] - a["logprob"] - a["update"] + d["logprob"] + d["update"]
        L.append(f"  ARMOR kept fewer prompts than DAPO trains on; with DAPO's log-prob + update times in "
                 f"place of its own (a full batch; estimate) the ratio is {est / d['total']:.2f}")
    if has_trl:
        r2 = d["total"] / t["total"]
        L.append(f"DAPO / TRL step time:  {r2:.2f} (target <= {TARGET_DAPO_OVER_TRL}: "
                 f"{'met' if r2 <= TARGET_DAPO_OVER_TRL else 'MISSED'})")
    else:
        L.append(f"TRL: {t}")
    return "\n".join(L)


def run(world=None, steps: int = 5, warmup: int = 1, threads: int = 2, skip_trl: bool = False, *,
        prompts: int = PROMPTS, group: int = GROUP, max_new_tokens: int = MAX_NEW_TOKENS, log=None,
        fast: str = FAST) -> dict:
    """Run the contenders and return the figures (format them with format_report)."""
    if steps < 1 or warmup < 0 or threads < 1:
        raise ValueError("need --steps >= 1, --warmup >= 0, --threads >= 1")
    log = log or (lambda msg: None)
    os.environ.setdefault("ARMOR_PROGRESS", "0")
    torch.set_num_threads(threads)
    w = ensure_world(world)
    from common.models import load_model
    n_params = sum(p.numel() for p in load_model(str(w / "base_model")).parameters())
    res = {"config": {"world": str(w), "n_params": n_params, "prompts": prompts, "group": group,
                      "max_new_tokens": max_new_tokens, "temperature": TEMPERATURE, "threads": threads,
                      "steps": steps, "warmup": warmup, "cpus": os.cpu_count(),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"), "fast": fast},
           "versions": versions(), "load_before": load_average()}
    total = warmup + steps
    with tempfile.TemporaryDirectory(prefix="armor-bench-") as tmp:
        arms = {arm: OurArm(run_config(w, Path(tmp) / arm, arm, threads=threads, total_steps=total,
                                       prompts=prompts, group=group, max_new_tokens=max_new_tokens,
                                       fast=fast))
                for arm in ("dapo", "armor")}

        def our_round():   # one step of each of our arms
            for arm in arms.values():
                if len(arm.rows) < total:
                    arm.step()

        try:
            if skip_trl:
                res["trl"] = "skipped (--skip-trl)"
            elif trl_version() is None:
                res["trl"] = "TRL not installed (pip install \"torch==<your torch>\" -e '.[bench]')"
            else:
                log(f"[bench] TRL, DAPO, ARMOR interleaved: {warmup} + {steps} steps each")
                try:
                    res["trl"] = run_trl(w, Path(tmp) / "trl", threads=threads, steps=steps, warmup=warmup,
                                         prompts=prompts, group=group, max_new_tokens=max_new_tokens,
                                         between_steps=our_round)
                except Exception as e:   # our figures still count; say why TRL's are missing
                    res["trl"] = f"TRL {trl_version()} failed: {type(e).__name__}: {e}"
            if len(arms["dapo"].rows) < total:
                log(f"[bench] DAPO, ARMOR interleaved: {warmup} + {steps} steps each")
            while any(len(arm.rows) < total for arm in arms.values()):
                our_round()
        finally:
            for arm in arms.values():
                arm.close()
        for name, arm in arms.items():
            res[name] = summarize_ours(arm.rows[warmup:])
            res[name]["rows"] = arm.rows[warmup:]
    res["load_after"] = load_average()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.step_time", description=__doc__.split("\n")[0])
    ap.add_argument("--world", default=None, help="toy world folder (default: build the quick world into "
                                                  f"{DEFAULT_WORLD.relative_to(ROOT)})")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per contender (median)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps per contender (not measured)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads for every contender")
    ap.add_argument("--skip-trl", action="store_true", help="do not run TRL's GRPOTrainer")
    ap.add_argument("--fast", choices=["auto", "off", "native"], default=FAST,
                    help=f"our arms' compute.fast (default {FAST}, as the tiny presets)")
    ap.add_argument("--json", default=None,
                    help="also write the figures (and our per-step rows) to this file")
    a = ap.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*requires_grad=True to a scalar.*")
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    res = run(a.world, a.steps, a.warmup, a.threads, a.skip_trl,
              log=lambda m: print(m, file=sys.stderr, flush=True), fast=a.fast)
    print(format_report(res), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

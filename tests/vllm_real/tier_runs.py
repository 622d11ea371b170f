"""What the tier's trainer and evaluator tests share: the ARMOR arm's command line on a quick world, a run in
a child process (vLLM's external_launcher joins, then tears down, that process's group), the checks on a
finished run, and an eval.evaluate run's samples."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"
TWO_RANKS = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def armor_args(world: Path, out: Path, *extra: str) -> list[str]:
    return ["--config", str(SMOKE), f"model.path={world / 'base_model'}",
            f"data.train={world / 'data' / 'train.jsonl'}",
            f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]",
            "validation.max_problems=8", f"output_dir={out}", "rollout.engine=vllm",
            "rollout.enforce_eager=true", "algo.anchor.enabled=true", "algo.mix.variant=mixed",
            "algo.mix.alpha=0.875", "algo.reference.reset.every=2", "batch.prompts_per_step=4",
            "rollout.gen_batch_prompts=8", *extra]


def run(cmd: list[str], **env) -> subprocess.CompletedProcess:
    env = {**os.environ, "ARMOR_PROGRESS": "0", "PYTHONUNBUFFERED": "1", **env}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def check_run(out: Path, r: subprocess.CompletedProcess) -> list[dict]:
    """A finished ARMOR run: 4 steps with kept prompts, anchors and a reference reset, the engine's log-probs
    equal to the trainer's after every update (fp32 on both sides: float rounding only), the last
    checkpoint written. Returns the metric rows."""
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert (out / "DONE").is_file()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and sum(r["prompts_kept"] for r in rows) > 0
    assert sum(r["anchors"] for r in rows) > 0 and any(r["reference_reset"] for r in rows)
    mm = [r["logprob_mismatch"] for r in rows if "logprob_mismatch" in r]
    assert mm and max(mm) < 1e-4, mm
    assert (out / "checkpoints" / "step_000004" / "config.json").is_file()
    return rows


def evaluate(ckpt: Path, world: Path, out: Path, engine: str, ranks: int = 1, n: int = 64) -> list[dict]:
    """eval.evaluate's greedy samples of the first n test problems on `engine`, on 1 process or `ranks`."""
    launch = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                                 if ranks > 1 else [])
    cmd = [*launch, "-m", "eval.evaluate", "--checkpoint", str(ckpt), "--protocol", "greedy",
           "--limit", str(n), "--benchmarks", f"toy_test={world / 'data' / 'test.jsonl'}", "--engine", engine,
           "--enforce-eager", "--chunk-size", "16", "--grader-workers", "0", "--no-progress",
           "--out", str(out)]
    r = run(cmd, OMP_NUM_THREADS="1")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    f = out / ckpt.name / "toy_test__greedy__k1.samples.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()]


SAMPLE_KEYS = ("index", "sample", "response", "extracted", "correct", "length", "finished")


def sample_rows(samples: list[dict]) -> list[list]:
    return [[s[k] for k in SAMPLE_KEYS] for s in samples]

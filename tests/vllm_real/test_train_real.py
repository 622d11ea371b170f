"""armor.train with the real vLLM engine (its CPU build) on 1 and 2 gloo ranks, the ARMOR arm (anchors, the
mixed ratio, reference resets): prompts are kept and the engine's log-probs equal the trainer's; a weight push
that misses a layer (the tied lm_head, as the adapter once did) stops the run on logprob_mismatch."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"


def armor_args(world: Path, out: Path, *extra: str) -> list[str]:
    return ["--config", str(SMOKE), f"model.path={world / 'base_model'}",
            f"data.train={world / 'data' / 'train.jsonl'}",
            f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]",
            "validation.max_problems=8", f"output_dir={out}", "rollout.engine=vllm",
            "rollout.enforce_eager=true", "algo.anchor.enabled=true", "algo.mix.variant=mixed",
            "algo.mix.alpha=0.875", "algo.reference.reset.every=2", "batch.prompts_per_step=4",
            "rollout.gen_batch_prompts=8", *extra]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "ARMOR_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def check_run(out: Path, r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert (out / "DONE").is_file()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and sum(r["prompts_kept"] for r in rows) > 0
    assert sum(r["anchors"] for r in rows) > 0 and any(r["reference_reset"] for r in rows)
    mm = [r["logprob_mismatch"] for r in rows if "logprob_mismatch" in r]
    assert mm and max(mm) < 1e-4, mm          # fp32 on both sides: float rounding only
    assert (out / "checkpoints" / "step_000004" / "config.json").is_file()


def test_armor_trains_on_one_rank(vllm_world, tmp_path):
    out = tmp_path / "one"
    check_run(out, run([sys.executable, "-m", "armor.train", *armor_args(vllm_world, out)]))


def test_armor_trains_on_two_ranks(vllm_world, tmp_path):
    out = tmp_path / "two"
    check_run(out, run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "armor.train", *armor_args(vllm_world, out)]))


# the adapter's old push: tied entries once, under the first name (lm_head.weight left out)
_CORRUPT = """
import sys
import common.rollout.vllm_engine as V
full = V.named_full_tensors
V.named_full_tensors = lambda m, dtype=None: ((k, t) for k, t in full(m, dtype) if k != "lm_head.weight")
from armor.train import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_push_that_misses_a_layer_stops_the_run(vllm_world, tmp_path):
    out = tmp_path / "corrupt"
    r = run([sys.executable, "-c", _CORRUPT, *armor_args(vllm_world, out)])
    assert r.returncode != 0 and not (out / "DONE").exists()
    err = r.stderr[-3000:]
    assert "RunHealthError: step 1: logprob_mismatch" in err and "engine vllm" in err, err
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())

"""Several ranks (torchrun, gloo on CPU): the SPMD trainer equals one process over the same rollout shards.

The reference is one process with `rollout.shards=2` and micro-batches of half a mini-batch, i.e. the 2 ranks'
partition emulated (armor/spmd.py): the same prompts are drawn, each shard sampled with the same seed, the
same prompts and anchors kept, and each rank's part of a mini-batch is one micro-batch of the one process."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from armor.trainer import DETERMINISTIC_KEYS
from common.jsonl import read_jsonl

from toy_runs import ROOT, SMOKE, hf_weights, run, train_cmd

# HF's forward on every run (compute.fast=off): FSDP2's shards always compute through it, and the one-process
# runs compared with them must too (the lean forward moves weights by ~5e-6 in 4 steps: test_lean_forward.py
# checks it against HF's forward); both update with the fused AdamW (armor.trainer.fused_adamw)
ARGS = ["compute.fast=off", "schedule.save_every=2", "schedule.validate_every=2", "validation.max_problems=8",
        "algo.anchor.enabled=true", "algo.mix.variant=mixed", "algo.mix.alpha=0.875",
        "algo.reference.reset.every=3", "rollout.shards=2", "batch.micro_batch_responses=4"]
STEPS = 4


def _run(world: Path, out: Path, ranks: int, fault: str | None = None,
         extra: tuple = ()) -> subprocess.CompletedProcess:
    return run(train_cmd(world, out, f"schedule.total_steps={STEPS}", "parallel.timeout_s=600", *ARGS, *extra,
                         ranks=ranks), fault, threads=1)


def _ok(r):
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]


def _same(a: Path, b: Path, tol: float = 1e-5, weight_tol: float = 1e-6, steps: int = STEPS) -> None:
    ma, mb = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [r["step"] for r in ma] == [r["step"] for r in mb] == list(range(1, steps + 1))
    for ra, rb in zip(ma, mb):
        for k in ("prompts_drawn", "prompts_kept", "anchors", "ref_samples", "reference_reset"):
            assert ra[k] == rb[k], (ra["step"], k)
        for k in DETERMINISTIC_KEYS:
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], abs=tol), (ra["step"], k, ra[k], rb[k])
    assert [(r["step"], r["value"]) for r in read_jsonl(a / "validation.jsonl")] == \
        [(r["step"], r["value"]) for r in read_jsonl(b / "validation.jsonl")]
    wa = hf_weights(a / "checkpoints" / f"step_{steps:06d}")
    wb = hf_weights(b / "checkpoints" / f"step_{steps:06d}")
    assert set(wa) == set(wb)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= weight_tol
    assert (b / "DONE").is_file()


@pytest.fixture(scope="module")
def runs(world, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    one, two = tmp / "one", tmp / "two"
    _ok(_run(world, one, 1))
    _ok(_run(world, two, 2))
    return {"one": one, "two": two, "tmp": tmp}


def test_two_ranks_equal_one_process(runs):
    _same(runs["one"], runs["two"])
    assert not (runs["two"] / "metrics.jsonl.tmp").exists()
    assert len(list((runs["two"]).glob("DONE*"))) == 1


def test_two_rank_step_folder_loads_in_transformers(runs, world):
    from transformers import AutoModelForCausalLM
    step = runs["two"] / "checkpoints" / f"step_{STEPS:06d}"
    m2 = AutoModelForCausalLM.from_pretrained(step).eval()
    m1 = AutoModelForCausalLM.from_pretrained(runs["one"] / "checkpoints" / f"step_{STEPS:06d}").eval()
    ids = torch.tensor([[5, 9, 11, 3, 7, 2]])
    with torch.no_grad():
        # weights within 1e-6
        torch.testing.assert_close(m2(ids).logits, m1(ids).logits, rtol=1e-4, atol=1e-5)


def test_two_ranks_with_token_micro_batches_and_chunked_logprobs(runs, world):
    """The paper-scale memory path on 2 ranks (rows dealt to ranks by tokens, micro-batches padded to their
    own longest row, the lm_head in chunks through the FSDP2-registered method, activation checkpointing
    inside the FSDP2 layers) equals the one process of the default path: the same kept prompts and anchors,
    metrics within 1e-5; weights within 1e-5, since the rows meet in other micro-batches and ranks (float
    rounding: tests/integration/test_trainer.py measures the default path's own)."""
    out = runs["tmp"] / "tokens"
    _ok(_run(world, out, 2, extra=("batch.micro_batch_tokens=80", "batch.logprob_chunk_tokens=16",
                                   "model.gradient_checkpointing=true")))
    _same(runs["one"], out, weight_tol=1e-5)


@pytest.mark.slow      # two more runs for MOPD's monitors; two ranks equal one process: the tests above
def test_mopd_token_metrics_on_two_ranks_equal_one_process(runs, world):
    """MOPD's token advantages (outcome + teacher signal) exist only for each rank's own rows: its
    advantage_abs_mean, entropy and KL monitors are means over all ranks' rows, as one process computes them
    (they were diluted by the rows another rank holds)."""
    mopd = ("algo.anchor.enabled=false", "algo.mix.variant=plain", "algo.distill.mode=mopd",
            "algo.reference.reset.every=null", "schedule.total_steps=2", "schedule.validate_every=0")
    one, two = runs["tmp"] / "mopd1", runs["tmp"] / "mopd2"
    _ok(_run(world, one, 1, extra=mopd))
    _ok(_run(world, two, 2, extra=mopd))
    for ra, rb in zip(read_jsonl(one / "metrics.jsonl"), read_jsonl(two / "metrics.jsonl"), strict=True):
        assert ra["prompts_kept"] == rb["prompts_kept"] > 0
        for k in ("advantage_abs_mean", "entropy", "kl_reverse", "kl_forward", "logprob_mismatch"):
            assert rb[k] == pytest.approx(ra[k], rel=1e-4, abs=1e-6), (ra["step"], k, ra[k], rb[k])


def test_two_rank_kill_then_resume_on_two_ranks(runs, world):
    out = runs["tmp"] / "killed2"
    r = _run(world, out, 2, "update@3")
    assert r.returncode != 0 and not (out / "DONE").exists()
    assert any(f"step_{2:06d}" == p.name for p in (out / "checkpoints").iterdir())
    _ok(_run(world, out, 2))
    _same(runs["two"], out)


@pytest.mark.slow      # 30-120 s: run with -m slow (README)
def test_two_rank_resume_after_a_reset_loads_the_reset_reference(runs, world):
    """Killed right after the step-4 checkpoint, whose πref (reset at step 3) is in its sharded state, resumed
    on two ranks (every rank builds πref on the meta device and reads its own shards): steps 5 and 6, where
    πref enters the mixed ratio and the KL monitor, equal an uninterrupted run's."""
    six = ("schedule.total_steps=6",)
    ref, out = runs["tmp"] / "six", runs["tmp"] / "killed_after_reset"
    _ok(_run(world, ref, 2, extra=six))
    r = _run(world, out, 2, "saved@4", extra=six)
    assert r.returncode != 0 and not (out / "DONE").exists()
    from armor.checkpoint import sharded_keys
    assert "reference" in sharded_keys(out / "checkpoints" / f"step_{4:06d}")
    _ok(_run(world, out, 2, extra=six))
    _same(ref, out, steps=6)


@pytest.mark.slow      # a kill on 2 ranks resumed on 1; on 2 resumed on 2: the default suite's test above
def test_two_rank_checkpoint_resumes_on_one_rank(runs, world):
    out = runs["tmp"] / "to_one"
    r = _run(world, out, 2, "metrics@3")
    assert r.returncode != 0 and not (out / "DONE").exists()
    _ok(_run(world, out, 1))     # the 2-rank checkpoint of step 2, resumed by one process
    _same(runs["one"], out)


def test_bf16_masters_are_refused_with_several_ranks(world, tmp_path):
    out = tmp_path / "never"
    r = run(train_cmd(world, out, "validation.benchmarks=[]", "schedule.validate_every=0",
                      "model.dtype=bfloat16", "parallel.timeout_s=60", ranks=2), timeout=300)
    assert r.returncode != 0 and "model.dtype" in r.stderr and "bfloat16" in r.stderr


@pytest.mark.slurm
@pytest.mark.slow      # the fig4 DAG's trainings, 2 ranks each, through SLURM (the launcher on SLURM in the
# default suite: test_slurm.py; torchrun in a SLURM job also in test_slurm_preempt.py and test_multinode.py)
def test_two_rank_cpu_train_jobs_through_the_real_slurm(world, tmp_path, slurm_cluster):
    """`run_all.py --cluster slurm` on a smoke preset with protocol.procs_per_node=2: each train job is one
    SLURM job whose wrapper starts torchrun with 2 CPU ranks; every run ends with one metrics file and one
    DONE."""
    import json as _json
    preset = tmp_path / "smoke.yaml"   # named smoke: the driver finds the --quick world it is given
    preset.write_text(
        f"base: {SMOKE}\n"
        f"model: {{path: {world / 'base_model'}}}\n"
        f"data: {{train: {world / 'data' / 'train.jsonl'}}}\n"
        f"validation: {{benchmarks: ['toy_val={world / 'data' / 'validation.jsonl'}']}}\n"
        f"protocol: {{procs_per_node: 2, eval_benchmarks: ['toy_test={world / 'data' / 'test.jsonl'}']}}\n")
    root = tmp_path / "runs"
    r = subprocess.run([sys.executable, "reproduce/run_all.py", "--preset", str(preset), "--cluster", "slurm",
                        "--root", str(root), "--only", "fig4", "--no-progress", "--poll", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    reg = _json.loads((root / "smoke" / "_jobs" / "state.json").read_text())
    trains = {k: v for k, v in reg.items() if k.startswith(("stage1/", "stage2/"))}
    assert trains and all(v["backend"] == "slurm" for v in trains.values())
    for key in trains:
        spec = _json.loads((root / "smoke" / "_jobs" / key / "spec.json").read_text())
        assert spec["ranks_per_node"] == 2 and spec["launch"] == "torchrun"
        log = (root / "smoke" / "_jobs" / key / "log.out").read_text()
        assert "torch.distributed.run" in log and "--nproc_per_node=2" in log, log[:500]
        run = root / "smoke" / Path(key).parts[1] / Path(key).parts[2]
        assert len(list(run.glob("metrics.jsonl*"))) == 1 and len(list(run.glob("DONE*"))) == 1
        assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, len(read_jsonl(
            run / "metrics.jsonl")) + 1))

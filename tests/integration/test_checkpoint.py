"""Checkpoints that fit a cluster: a stop signal saves the step in flight, retention keeps what θ* and the
evaluation need, each rank hashes only its own files, the bf16 HF export loads in transformers.

Every signal is sent by the trainer to itself at a named fault point (ARMOR_FAULT=POINT@STEP:SIGNAL[:RANK]),
so no test races a timer against the run."""
import json
import signal
from pathlib import Path

import pytest
import torch

from armor import checkpoint as ckpt
from armor.trainer import DETERMINISTIC_KEYS
from common.jsonl import read_jsonl
from reproduce.jobs.peaks import choose_peak, read_validation

from toy_runs import hf_weights, run, train_cmd

# validation every step, a checkpoint every 2 (and at step 5), one resumable state kept besides the protected
# ones
RETAIN = ["schedule.save_every=2", "schedule.validate_every=1", "validation.max_problems=8",
          "schedule.keep_last=1", "schedule.keep_best_window=3", "schedule.keep_steps=[5]"]
USR2 = "update@3:SIGUSR2"


def _train(world, out, steps, extra=(), fault=None):
    return run(train_cmd(world, out, f"schedule.total_steps={steps}", *extra), fault, threads=1)


def test_stop_signal_saves_the_step_in_flight_and_retention_keeps_what_evaluation_needs(world, tmp_path):
    ref, out = tmp_path / "ref", tmp_path / "stopped"
    r = _train(world, ref, 6, RETAIN)
    assert r.returncode == 0, r.stderr[-3000:]
    # SIGUSR2 (SLURM's time-limit warning) during step 3's update: step 3 completes, is saved, the process
    # leaves
    r = _train(world, out, 6, RETAIN, fault=USR2)
    assert r.returncode == 128 + signal.SIGUSR2, (r.returncode, r.stderr[-3000:])
    assert [x["step"] for x in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    assert ckpt.list_checkpoints(out)[-1] == 3 and ckpt.damage(ckpt.step_dir(out, 3)) is None
    assert not (out / "DONE").exists()
    r = _train(world, out, 6, RETAIN)                    # the requeue: resumes from step 3, loses nothing
    assert r.returncode == 0, r.stderr[-3000:]
    ma, mb = read_jsonl(ref / "metrics.jsonl"), read_jsonl(out / "metrics.jsonl")
    assert [x["step"] for x in mb] == list(range(1, 7))
    for ra, rb in zip(ma, mb):
        for k in DETERMINISTIC_KEYS:
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], abs=1e-6), (ra["step"], k)
    # retention: the stop's off-schedule save is gone, both runs keep the same checkpoints, and they hold what
    # the evaluation chooses among every scheduled checkpoint (jobs/evaluate.py: the smoothed argmax), step
    # 5 (keep_steps) and the last one, while older scheduled ones were deleted
    kept = ckpt.list_checkpoints(ref)
    assert ckpt.list_checkpoints(out) == kept and 3 not in kept
    scheduled = [2, 4, 5, 6]
    best = choose_peak(read_validation(ref), scheduled, 3)["step"]
    assert {best, 5, 6} <= set(kept) and len(kept) < len(scheduled)


RECORDER = """import os, sys, runpy
from pathlib import Path
import armor.checkpoint as c
log = Path(sys.argv.pop(1)) / f"hashed_rank{os.environ['RANK']}.txt"
real = c.sha256_file
def recording(p):
    with open(log, "a") as f:
        f.write(str(p) + "\\n")
    return real(p)
c.sha256_file = recording
sys.argv[0] = "armor.train"
runpy.run_module("armor.train", run_name="__main__")
"""


def test_two_ranks_stop_together_hash_their_own_files_and_export_bf16(world, tmp_path):
    """2 gloo ranks, schedule.export_dtype=bfloat16, SIGUSR2 to rank 1 alone during step 3: both ranks save
    step 3 and stop (the decision is a collective); each rank hashed only the files it wrote; the export is
    sharded safetensors with an index, parts from both ranks, bf16, loads in transformers and equals the fp32
    masters of the sharded state rounded to bf16; one process resumes from the masters, not the bf16
    export."""
    out, logs = tmp_path / "two", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    extra = ["schedule.save_every=2", "schedule.validate_every=0", "validation.benchmarks=[]",
             "rollout.shards=2", "schedule.export_dtype=bfloat16", "parallel.timeout_s=600"]
    r = run(train_cmd(world, out, "schedule.total_steps=4", *extra, ranks=2, entry=(str(script), str(logs))),
            fault="update@3:SIGUSR2:1", threads=1)
    assert r.returncode != 0 and not (out / "DONE").exists(), r.stderr[-3000:]
    assert "stopped by signal" in r.stdout + r.stderr, r.stderr[-3000:]
    assert [x["step"] for x in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    assert ckpt.list_checkpoints(out) == [2, 3]
    step = ckpt.step_dir(out, 3)
    assert ckpt.damage(step) is None
    manifest = json.loads((step / ckpt.MANIFEST).read_text())["files"]
    weight_map = json.loads((step / ckpt.INDEX).read_text())["weight_map"]
    parts = sorted(set(weight_map.values()))
    assert len(parts) == 2 and not (step / "model.safetensors").exists()
    hashed = {}
    for rank in (0, 1):
        for line in (logs / f"hashed_rank{rank}.txt").read_text().split():
            p = Path(line)
            if step.name + ".tmp" in p.parts:       # the step-3 save (folder step_000003.tmp while written)
                hashed.setdefault(rank, set()).add(
                    str(p.relative_to(out / "checkpoints" / (step.name + ".tmp"))))
    assert hashed[0].isdisjoint(hashed[1]) and hashed[0] | hashed[1] == set(manifest)
    own = {0: "sharded/__0_", 1: "sharded/__1_"}
    for rank in (0, 1):
        other = 1 - rank
        assert any(f.startswith(own[rank])
                   for f in hashed[rank]) and f"sharded/rng/rank_{rank}.pt" in hashed[rank]
        assert not any(f.startswith(own[other]) or f == f"sharded/rng/rank_{other}.pt" for f in hashed[rank])
        assert parts[rank] in hashed[rank]
    # the export: bf16, loads in transformers, = the masters rounded
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(step, dtype="auto")
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16}
    assert json.loads((step / "config.json").read_text())["dtype"] == "bfloat16"
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(str(step / ckpt.SHARDED), str(tmp_path / "masters.pt"))
    masters = torch.load(tmp_path / "masters.pt", weights_only=False)["model"]
    exported = hf_weights(step)
    assert set(exported) <= set(masters) and exported
    for k, v in exported.items():
        assert masters[k].dtype == torch.float32 and torch.equal(v, masters[k].to(torch.bfloat16)), k
    # one process resumes from the 2-rank checkpoint: the fp32 masters, not the export
    r = _train(world, out, 4, extra)
    assert r.returncode == 0 and (out / "DONE").is_file(), r.stderr[-3000:]
    assert [x["step"] for x in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4]

"""A preempted train job under torchrun on the real local SLURM (bash slurm/cluster_up.sh): `scontrol requeue`
sends SIGTERM and, the cluster's grace later (KillWait), SIGKILL; no save fits in between. The run saves its
training state in the background every step (schedule.state_every), so the requeue resumes from the last
saved state and loses no more completed steps than the plan prints (step_model.preemption_steps); the
result equals an uninterrupted run's. The job is held at a moment the test chooses (ARMOR_HOLD,
armor/faults.py): in step 4, after its first optimizer update, once the state of step 3 is complete."""
import json
import subprocess
import sys

import pytest

from armor import checkpoint as ckpt
from armor.config import load_config
from common.jsonl import read_jsonl
from reproduce.sizing.step_model import preemption_steps
from slurm import jobwrap
from slurm.launcher import DONE, Job, Launcher
from slurm.resources import Resources
from test_distributed import ARGS, STEPS, _ok, _run, _same
from toy_runs import SMOKE, world_overrides

pytestmark = pytest.mark.slurm
STATES = ["schedule.save_every=4", "schedule.state_every=1"]     # a checkpoint at step 4 only; states between


def _unless_failed(jdir, cond):
    def check():
        if (jdir / "failed").exists():
            pytest.fail("the train job failed\n" + (jdir / "log.err").read_text()[-3000:])
        return cond()
    return check


@pytest.mark.slow      # 30-120 s: run with -m slow (README)
@pytest.mark.timeout(1800)
def test_preempted_torchrun_job_resumes_from_its_last_state(slurm_cluster, world, tmp_path, wait_until):
    out, hold = tmp_path / "run", tmp_path / "hold"
    hold.mkdir()
    overrides = [*world_overrides(world, out), f"schedule.total_steps={STEPS}", "parallel.timeout_s=600",
                 *ARGS, *STATES]
    job = Job("stage1/preempted", [sys.executable, "-m", "armor.train", "--config", str(SMOKE), *overrides],
              kind="train", launch="torchrun", env={"ARMOR_PROGRESS": "0", "ARMOR_HOLD": f"update@4:{hold}"},
              resources=Resources(nodes=1, procs_per_node=2, cpus_per_task=2, mem_gb=4, time_min=60),
              done=lambda: (out / "DONE").exists())
    la = Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5, log=lambda s: None)
    la.run([job], wait=False)
    jid = la.load_registry()[job.key]["job_id"]
    jdir = la.job_dir(job.key)

    # attempt 1: held in step 4 once the state of step 3, written in the background, is complete
    wait_until(_unless_failed(jdir, lambda: (hold / "held").exists() and ckpt.list_states(out) == [3]),
               "the job held in step 4 with the state of step 3 saved")
    before = (out / "metrics.jsonl").read_text().splitlines()
    done_steps = [json.loads(x)["step"] for x in before]
    assert done_steps == [1, 2, 3] and ckpt.list_checkpoints(out) == []      # nothing but the state
    subprocess.check_call(["scontrol", "requeue", jid])      # SIGTERM, SIGKILL KillWait later
    wait_until(_unless_failed(jdir, lambda: len((jdir / "attempts.jsonl").read_text().splitlines()) == 2),
               "the requeued job's second attempt")
    (hold / "release").write_text("")                         # the resumed attempt passes step 4's hold

    states = Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5,
                      log=lambda s: None).run([job])
    assert states[job.key][0] == DONE and la.load_registry()[job.key]["job_id"] == jid   # requeued
    # torchrun waited for its ranks as long as the cluster does (KillWait + GraceTime), not its own 30 s
    grace = jobwrap.cluster_grace_s("debug")
    headers = [x for x in (jdir / "log.out").read_text().splitlines()
               if x.startswith("=== ") and "attempt" in x]
    assert len(headers) == 2 and all(f"--shutdown-timeout={int(grace)}" in h for h in headers), headers
    # resumed from the state of step 3: steps 1-3 not recomputed (their rows, timings included, are attempt
    # 1's), step 4 computed again; the completed steps lost are within the plan's bound
    after = (out / "metrics.jsonl").read_text().splitlines()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4]
    resumed_from = next((i for i, (a, b) in enumerate(zip(after, before)) if a != b), len(before))
    bound = preemption_steps(load_config(SMOKE, overrides).schedule)
    assert resumed_from == 3 and bound == 1 and max(done_steps) - resumed_from <= bound
    assert not (out / ckpt.STATE).exists() and ckpt.list_checkpoints(out) == [4]
    # the same run as one never interrupted (2 ranks, test_distributed's tolerances)
    ref = tmp_path / "ref"
    _ok(_run(world, ref, 2))
    _same(ref, out)

"""The training state saved between checkpoints (schedule.state_every, armor.checkpoint.AsyncStateSaver): the
run is the same with or without them, a kill resumes from the newest complete state and equals an
uninterrupted run, and a finished run's folder holds no state/. Kills at named points (armor.faults)."""
import signal
import subprocess
from pathlib import Path

import pytest

from armor import checkpoint as ckpt
from test_distributed import ARGS, STEPS, _ok, _same
from test_resume import ARMOR, _finished, _killed, assert_same_run
from toy_runs import run, train_cmd

STATES = ["schedule.save_every=4", "schedule.state_every=1"]     # checkpoints 4 and 8; states between


def _run(world: Path, out: Path, fault: str | None = None, extra: tuple = ()) -> subprocess.CompletedProcess:
    return run(train_cmd(world, out, "schedule.total_steps=8", *ARMOR, *STATES, *extra), fault)


@pytest.fixture(scope="module")
def plain(world, tmp_path_factory):
    """The same 8-step ARMOR run without state saves, never killed."""
    out = tmp_path_factory.mktemp("plain") / "run"
    _finished(_run(world, out, extra=("schedule.state_every=null",)))
    return out


def test_state_saves_change_nothing_and_leave_no_state_folder(world, plain, tmp_path):
    out = tmp_path / "run"
    _finished(_run(world, out))
    assert_same_run(plain, out, 8)
    assert ckpt.list_checkpoints(out) == ckpt.list_checkpoints(plain) and not (out / ckpt.STATE).exists()


def test_kill_resumes_from_the_newest_state_and_equals_an_uninterrupted_run(world, plain, tmp_path):
    """Killed mid-step 7 (the state of step 6 may still be in flight: the newest complete one resumes it),
    then while the step-8 checkpoint is written (the state of step 7 completes before a checkpoint starts)."""
    out = tmp_path / "run"
    _killed(_run(world, out, "update@7"), "update@7")
    assert ckpt.list_checkpoints(out) == [4] and ckpt.list_states(out) in ([5], [6])
    assert ckpt.load_state(out, ckpt.list_states(out)[0])["state_only"] is True
    _killed(_run(world, out, "checkpoint@8"), "checkpoint@8")
    assert ckpt.list_checkpoints(out) == [4] and ckpt.list_states(out) == [7]
    assert ckpt.latest_complete(out) == 7 and "reference" in ckpt.sharded_keys(ckpt.state_dir(out, 7))
    assert not (ckpt.state_dir(out, 7) / "config.json").exists()     # no HF export: the state alone
    _finished(_run(world, out))
    assert_same_run(plain, out, 8)
    assert not (out / ckpt.STATE).exists()


def test_a_preemptions_sigterm_saves_the_state_alone_and_the_run_resumes_from_it(world, plain, tmp_path):
    """SIGTERM (a preemption: only the cluster's grace before SIGKILL) during step 5's update: the run ends
    the step and saves its training state alone, off the schedule (state_every 3: states at 3 and 6,
    checkpoints at 4 and 8), not a whole checkpoint; it exits 128 + SIGTERM and resumes from step 5."""
    out = tmp_path / "run"
    r = _run(world, out, "update@5:SIGTERM", ("schedule.state_every=3",))
    assert r.returncode == 128 + signal.SIGTERM, (r.returncode, r.stderr[-3000:])
    assert ckpt.list_checkpoints(out) == [4] and ckpt.list_states(out) == [5]
    _finished(_run(world, out, extra=("schedule.state_every=3",)))
    assert_same_run(plain, out, 8)


@pytest.mark.slow      # 30-120 s: run with -m slow (README)
def test_two_ranks_resume_from_a_state_and_equal_an_uninterrupted_run(world, tmp_path):
    """Two ranks (torchrun, gloo): each writes its shards of the state in the background over its own gloo
    group; killed while the step-4 checkpoint is written, the run resumes from the state of step 3."""
    def two(out, fault=None, extra=()):
        return run(train_cmd(world, out, f"schedule.total_steps={STEPS}", "parallel.timeout_s=600", *ARGS,
                             *extra, ranks=2), fault, threads=1)
    ref, out = tmp_path / "ref", tmp_path / "run"
    _ok(two(ref))
    r = two(out, "checkpoint@4", ("schedule.save_every=4", "schedule.state_every=1"))
    assert r.returncode != 0 and not (out / "DONE").exists()
    assert ckpt.list_checkpoints(out) == [] and ckpt.list_states(out) == [3]
    files = ckpt.state_dir(out, 3) / ckpt.SHARDED
    assert {p.name for p in (files / "rng").iterdir()} == {"rank_0.pt", "rank_1.pt"}
    assert ckpt.damage(ckpt.state_dir(out, 3)) is None                # both ranks' files in the manifest
    _ok(two(out, extra=("schedule.save_every=4", "schedule.state_every=1")))
    _same(ref, out)


def test_bad_state_every_is_named(world, tmp_path):
    r = _run(world, tmp_path / "never", extra=("schedule.state_every=0",))
    assert r.returncode != 0 and "schedule.state_every: 0 must be >= 1" in r.stderr

"""Kill-and-resume at moments the test chooses (armor.faults), torn JSONL lines and damaged checkpoints.

Every kill is a SIGKILL the trainer sends itself at a named fault point (ARMOR_FAULT=POINT@STEP), so a test
never races a timer against the run; each killed process is checked to have died by that signal, so a point
that is never reached fails the test instead of passing it silently."""
import signal
import subprocess
from pathlib import Path

import pytest

from armor.trainer import DETERMINISTIC_KEYS
from common.jsonl import read_jsonl, write_jsonl

from toy_runs import run, train_cmd

# one ARMOR run: anchors, the mixed ratio, reference resets every 3 steps, validation and checkpoints every 2
ARMOR = ["schedule.save_every=2", "schedule.validate_every=2", "validation.max_problems=8",
         "algo.anchor.enabled=true", "algo.mix.variant=mixed", "algo.mix.alpha=0.875",
         "algo.reference.reset.every=3", "schedule.keep_last=2"]


def _run(world: Path, out: Path, steps: int, fault: str | None = None) -> subprocess.CompletedProcess:
    return run(train_cmd(world, out, f"schedule.total_steps={steps}", *ARMOR), fault)


def _killed(r: subprocess.CompletedProcess, fault: str) -> None:
    assert r.returncode == -signal.SIGKILL, \
        f"{fault}: not killed there (rc {r.returncode}): {r.stderr[-2000:]}"


def _finished(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stderr[-3000:]


def assert_same_run(a: Path, b: Path, steps: int) -> None:
    """Per-step metrics (DETERMINISTIC_KEYS, 1e-6) and validation values of two runs agree."""
    ma, mb = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [r["step"] for r in mb] == list(range(1, steps + 1))
    assert [r["reference_reset"] for r in mb] == [r["reference_reset"] for r in ma]
    for ra, rb in zip(ma, mb):
        for k in DETERMINISTIC_KEYS:
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], abs=1e-6), (ra["step"], k)
    va, vb = read_jsonl(a / "validation.jsonl"), read_jsonl(b / "validation.jsonl")
    assert [(r["step"], r["value"]) for r in vb] == [(r["step"], r["value"]) for r in va]
    assert (b / "DONE").is_file()


@pytest.fixture(scope="module")
def uninterrupted(world, tmp_path_factory):
    """The reference: the same ARMOR run, 8 steps, never killed (the 6-step tests compare its first rows)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    _finished(_run(world, out, 8))
    return out


def _prefix(run: Path, steps: int, dst: Path) -> Path:
    """The uninterrupted run's first `steps` metrics and validation rows, as a run folder to compare with."""
    dst.mkdir(parents=True)
    for name in ("metrics.jsonl", "validation.jsonl"):
        rows = [r for r in read_jsonl(run / name) if r["step"] <= steps]
        write_jsonl(dst / name, rows)
    (dst / "DONE").write_text("{}\n")
    return dst


def test_kills_at_chosen_points_then_resume_gives_identical_metrics(world, uninterrupted, tmp_path):
    """Killed mid-update (step 3, resumed from step 2) and while writing the step-4 checkpoint."""
    out = tmp_path / "run"
    for fault in ("update@3", "checkpoint@4"):
        _killed(_run(world, out, 6, fault), fault)
        assert not (out / "DONE").exists()
    assert not (out / "checkpoints" / "step_000004").exists()      # the half-written save was never renamed
    _finished(_run(world, out, 6))
    assert_same_run(_prefix(uninterrupted, 6, tmp_path / "ref"), out, 6)


def test_torn_metrics_line_is_dropped_with_a_warning_naming_the_file(world, uninterrupted, tmp_path):
    out = tmp_path / "run"
    _killed(_run(world, out, 6, "metrics@3"), "metrics@3")
    metrics = out / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"step": 4, "reward_mean": 0.1')   # a write cut short
    r = _run(world, out, 6)
    _finished(r)
    assert "TornLineWarning" in r.stderr and str(metrics) in r.stderr
    assert_same_run(_prefix(uninterrupted, 6, tmp_path / "ref"), out, 6)


def test_damaged_newest_checkpoint_is_reported_and_skipped(world, uninterrupted, tmp_path):
    out = tmp_path / "run"
    _killed(_run(world, out, 6, "metrics@5"), "metrics@5")
    newest = out / "checkpoints" / "step_000004"
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])   # a truncated copy
    r = _run(world, out, 6)
    _finished(r)
    assert ("DamagedCheckpointWarning" in r.stderr and str(newest) in r.stderr
            and "model.safetensors" in r.stderr)
    aside = out / "checkpoints" / "step_000004.damaged"   # kept for inspection, not deleted
    assert (aside / "model.safetensors").stat().st_size < weights.stat().st_size
    assert (newest / "checkpoint.json").is_file()       # step 4 recomputed from step 2 and saved whole
    assert_same_run(_prefix(uninterrupted, 6, tmp_path / "ref"), out, 6)


# the ten kills: sampling, Anchor Rollout, the update, right after a reset, after the metrics row, validation,
# checkpoint writing (before and after the rename), a later reset, and the moment before DONE
TEN_KILLS = ("sample@1", "anchor@2", "update@3", "reset@3", "metrics@3", "validate@4", "checkpoint@4",
             "saved@4", "reset@6", "done@8")


@pytest.mark.slow
def test_ten_kills_of_one_armor_run(world, uninterrupted, tmp_path):
    """`python -m pytest -m slow tests/integration/test_resume.py`: one 8-step ARMOR run SIGKILLed at ten
    points in turn, resumed after each, equals the uninterrupted run."""
    out = tmp_path / "run"
    for fault in TEN_KILLS:
        _killed(_run(world, out, 8, fault), fault)
        assert not (out / "DONE").exists(), fault
    _finished(_run(world, out, 8))
    assert_same_run(uninterrupted, out, 8)


def test_fault_points_are_checked_before_work(world, tmp_path):
    r = _run(world, tmp_path / "never", 2, "nowhere@1")
    assert r.returncode != 0 and "ARMOR_FAULT" in r.stderr and "nowhere@1" in r.stderr

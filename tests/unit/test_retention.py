"""Checkpoint retention, the HF export's split over ranks, stop requests and their fault points (pure
parts)."""
import itertools
import os
import random
import signal

import pytest

from armor import checkpoint as ckpt
from armor import faults
from armor.config import ConfigError, ScheduleConfig, load_config
from armor.stop import StopRequest
from common.distributed import Dist
from reproduce.matrix.arms import build_arms
from reproduce.jobs.peaks import choose_peak
from reproduce.matrix.presets import ExperimentError, load_preset
from reproduce.matrix.retention import check_retention, retention_overrides

SMOKE = load_preset("smoke").path


def _folders(run, steps):
    for s in steps:
        d = ckpt.step_dir(run, s)
        d.mkdir(parents=True)
        (d / "trainer_state.pt").write_text("x")


def test_prune_keeps_the_newest_the_protected_and_drops_off_schedule_saves(tmp_path):
    _folders(tmp_path, [2, 4, 5, 6, 7, 8])
    gone = ckpt.prune(tmp_path, 2, {4}, scheduled=lambda s: s % 2 == 0)
    assert gone == [2, 5, 6, 7] and ckpt.list_checkpoints(tmp_path) == [4, 8]


def test_prune_never_deletes_the_newest_even_off_schedule_and_keeps_all_without_keep_last(tmp_path):
    _folders(tmp_path, [2, 3, 4, 5])
    assert ckpt.prune(tmp_path, None, set(), scheduled=lambda s: s % 2 == 0) == [3]   # 5: the resume point
    assert ckpt.list_checkpoints(tmp_path) == [2, 4, 5]
    assert ckpt.prune(tmp_path, 1, set(), scheduled=lambda s: s % 2 == 0) == [2, 4]
    assert ckpt.list_checkpoints(tmp_path) == [5]


def test_the_manager_says_when_a_step_is_due_and_which_steps_are_protected():
    cm = ckpt.CheckpointManager("unused", ScheduleConfig(total_steps=10, save_every=4, keep_steps=[5]))
    assert [s for s in range(1, 12) if cm.due(s)] == [4, 5, 8, 10]
    curve = [(0, 0.1), (4, 0.5), (5, 0.3), (6, 0.9), (8, 0.2)]      # step 6: validated, never saved
    assert cm.protected(curve, (0.9, 6)) == {4, 5, 6}     # the best saved one, the best so far, keep_steps
    off = ckpt.CheckpointManager("unused", ScheduleConfig(total_steps=10, save_every=4, keep_steps=[5],
                                                          keep_best_window=0))
    assert off.protected(curve, (0.9, 6)) == {5}


class _Models:
    """armor.models.Models as the manager sees it: save writes a step folder, reference_step, dist."""

    def __init__(self, run_dir):
        self.run_dir, self.dist, self.reference_step, self.saved = run_dir, Dist(), None, []

    def save(self, run_dir, step, optimizer, state):
        self.saved.append((step, state["val_curve"][-1]))
        _folders(run_dir, [step])


def test_the_manager_saves_through_the_models_then_keeps_the_newest_the_protected_and_pi_ref(tmp_path):
    cm = ckpt.CheckpointManager(tmp_path, ScheduleConfig(total_steps=10, save_every=2, keep_last=1))
    models, curve = _Models(tmp_path), [(2, 0.9)]

    def save(step, value=None):
        if value is not None:
            curve.append((step, value))
        cm.save(models, step, None, {"val_curve": list(curve), "best_val": max((v, s) for s, v in curve)})
        return ckpt.list_checkpoints(tmp_path)
    assert save(2) == [2]
    assert save(4, 0.1) == [2, 4]                   # 2: the best validation
    models.reference_step = 4
    assert save(6, 0.2) == [2, 4, 6]                # 4: πref's
    models.reference_step = None
    assert save(7) == [2, 7]                        # a stop signal's save: 7 is the resume point
    assert save(8, 0.3) == [2, 8]                   # off the schedule, 7 goes once 8 is complete
    assert [s for s, _ in models.saved] == [2, 4, 6, 7, 8] and models.saved[1] == (4, (4, 0.1))


def test_best_candidates_always_hold_the_argmax_the_evaluation_chooses():
    """Whatever values come later, the smoothed argmax among saved steps (reproduce.jobs.peaks.choose_peak) is
    never a step that best_candidates let go of at an earlier point of the curve."""
    rng = random.Random(0)
    for trial in range(300):
        window = rng.choice([1, 2, 3, 4, 5])
        n = rng.randint(1, 12)
        curve = [(s, float(rng.randint(0, 4))) for s in range(n)]
        saved = {s for s, _ in curve if s >= 1 and rng.random() < 0.7}
        if not saved:
            continue
        best = choose_peak(curve, sorted(saved), window)["step"]
        for t in range(1, n + 1):         # the curve as the trainer saw it after t validations
            seen = [s for s, _ in curve[:t] if s in saved]
            if best in seen:
                assert best in ckpt.best_candidates(curve[:t], set(seen), window), \
                    (trial, t, curve, saved, window)
    assert ckpt.best_candidates([(1, 0.5)], {1}, 0) == set()


def test_part_owners_split_by_bytes_in_order():
    assert ckpt.part_owners([4, 4, 4, 4], 2) == [0, 0, 1, 1]
    assert ckpt.part_owners([10, 1, 1], 4) == [0, 3, 3]
    for sizes, w in itertools.product([[1] * 7, [5, 1, 9, 2, 2]], [1, 2, 3, 8]):
        owners = ckpt.part_owners(sizes, w)
        assert owners == sorted(owners) and all(0 <= o < w for o in owners)


def test_stop_request_is_recorded_and_agreed_at_world_size_one():
    def before(signum, frame):              # whatever handler was there: close() must put it back
        pass
    prev = signal.signal(signal.SIGUSR2, before)
    try:
        stop = StopRequest(["SIGUSR2"])
        try:
            assert signal.getsignal(signal.SIGUSR2) is not before      # the request's own handler
            assert stop.agreed(Dist()) is None
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stop.agreed(Dist()) == signal.SIGUSR2
        finally:
            stop.close()
        assert signal.getsignal(signal.SIGUSR2) is before
    finally:
        signal.signal(signal.SIGUSR2, prev)


def test_fault_specs_with_a_signal_and_a_rank(monkeypatch):
    assert faults._parse("update@3:SIGUSR2:1") == {("update", 3): (signal.SIGUSR2, 1)}
    assert faults._parse("sample@2") == {("sample", 2): (signal.SIGKILL, None)}
    with pytest.raises(ValueError, match="SIGNOPE"):
        faults._parse("update@3:SIGNOPE")


@pytest.mark.parametrize("key,value", [("schedule.stop_signals", "[SIGKILL]"),
                                       ("schedule.stop_signals", "[NOPE]"),
                                       ("schedule.keep_best_window", "-1"), ("schedule.keep_steps", "[0]")])
def test_bad_retention_settings_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key.split(".")[1]):
        load_config(SMOKE, [f"{key}={value}"])


def test_paper_preset_passes_protected_steps_and_the_check():
    p = load_preset("qwen25-math-7b")
    assert p.cfg.schedule.save_every == 20 and p.cfg.schedule.export_dtype == "bfloat16"
    arms = build_arms(p)
    check_retention(p, arms, p.protocol.seeds)
    assert retention_overrides(p, arms["dapo"]) == ["schedule.keep_steps=[140,200]",
                                                    "schedule.keep_best_window=1"]
    assert retention_overrides(p, arms["armor"], {"step": 140}) == ["schedule.keep_steps=[200]",
                                                                     "schedule.keep_best_window=1"]


def test_tiny_runs_get_no_retention_overrides():
    p = load_preset("tiny")
    arms = build_arms(p)
    assert p.cfg.schedule.keep_last is None and p.cfg.schedule.export_dtype == "model"
    assert all(retention_overrides(p, a, {"step": 15}) == [] for a in arms.values())


def test_a_retention_that_deletes_theta_star_candidates_fails_at_plan_time(tmp_path):
    text = (load_preset("tiny").path.read_text().replace("late_start_fraction: 0.4", "late_start_step: 40")
            .replace("  save_every: 5\n", "  save_every: 5\n  keep_last: 2\n"))
    f = tmp_path / "tiny.yaml"
    f.write_text(text)
    p = load_preset(f)
    with pytest.raises(ExperimentError, match=r"schedule.keep_last=2: θ\* of dapo"):
        check_retention(p, build_arms(p), p.protocol.seeds)

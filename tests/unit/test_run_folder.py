"""The run folder's checks before any work (armor.run_folder.check) and the step's phase timing
(armor.step_state.timed)."""
from pathlib import Path

import pytest

from armor import run_folder, step_state
from armor.config import load_config

SMOKE = Path(__file__).resolve().parents[2] / "reproduce" / "presets" / "smoke.yaml"


def test_an_output_dir_that_cannot_be_a_folder_is_an_error_naming_it(tmp_path):
    afile = tmp_path / "a_file"
    afile.write_text("x")
    for bad, why in ((afile, "is an existing file"), (afile / "run", f"{str(afile)!r} is a file")):
        with pytest.raises(ValueError, match="output_dir") as e:
            run_folder.check(load_config(SMOKE, [f"output_dir={bad}"]))
        assert repr(str(bad)) in str(e.value) and why in str(e.value)
    for good in (tmp_path, tmp_path / "new" / "run"):
        run_folder.check(load_config(SMOKE, [f"output_dir={good}"]))
    assert not (tmp_path / "new").exists() and afile.read_text() == "x"


def test_timed_adds_the_block_to_its_phase_even_when_it_raises(monkeypatch):
    clock = iter([101.5, 102.0, 104.25, 110.0])
    monkeypatch.setattr(step_state.time, "perf_counter", lambda: next(clock))
    tm = step_state.PhaseTimes(started=100.0)
    with step_state.timed(tm, "update"):
        pass                                            # 101.5 -> 102.0
    with pytest.raises(KeyError):
        with step_state.timed(tm, "update"):            # 104.25 -> 110.0, then the error propagates
            raise KeyError("x")
    assert tm.update == 0.5 + 5.75 and tm.generate == 0.0
    clock = iter([107.5])
    tm.tokens = 3
    assert list(tm.metrics().items()) == [("time_generate", 0.0), ("time_score", 0.0), ("time_logprob", 0.0),
                                          ("time_update", 6.25), ("tokens_generated", 3), ("time_step", 7.5)]

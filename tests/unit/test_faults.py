"""armor.faults' hold (ARMOR_HOLD=POINT@STEP:DIR): a run paused at a named moment until a test releases it."""
import threading

import pytest

from armor import faults


@pytest.mark.parametrize("spec", ["saved@2", "saved@2:", "nope@2:/tmp/x", "saved@x:/tmp/x",
                                  "saved@2,done@3:/tmp"])
def test_a_malformed_hold_is_refused_naming_it(monkeypatch, spec):
    monkeypatch.setenv(faults.HOLD_ENV, spec)
    with pytest.raises(ValueError, match="ARMOR_HOLD"):
        faults.check_env()


def test_the_hold_pauses_at_its_point_only_until_released(monkeypatch, tmp_path, wait_until):
    monkeypatch.delenv(faults.ENV, raising=False)
    monkeypatch.setenv(faults.HOLD_ENV, f"saved@2:{tmp_path}")
    faults.check_env()
    faults.point("saved", 1)
    faults.point("metrics", 2)
    assert not (tmp_path / "held").exists()          # other points and steps pass straight through
    t = threading.Thread(target=faults.point, args=("saved", 2), daemon=True)
    t.start()
    wait_until((tmp_path / "held").exists, "the hold's marker")
    assert t.is_alive()                              # held: it only polls for the release file
    (tmp_path / "release").write_text("")
    t.join()

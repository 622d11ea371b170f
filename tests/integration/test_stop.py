"""The job wrapper's stop request: a file the trainer reads at step boundaries (armor.stop), created by
jobwrap.terminate_child on SLURM's time-limit warning before any signal (torchrun kills its ranks 30 s after
a SIGTERM: too soon for a 7B step and its save)."""
import signal
import subprocess
import sys

from armor import stop
from slurm import jobwrap


class OneRank:
    def all_gather_object(self, x):
        return [x]


def test_the_stop_file_stops_at_the_next_boundary(tmp_path, monkeypatch):
    f = tmp_path / "stop_requested"
    monkeypatch.setenv(stop.STOP_FILE_ENV, str(f))
    req = stop.StopRequest([])
    try:
        assert req.agreed(OneRank()) is None
        f.touch()
        assert req.agreed(OneRank()) == signal.SIGUSR2
    finally:
        req.close()


def test_terminate_child_asks_through_the_file_before_any_signal(tmp_path, monkeypatch):
    f = tmp_path / "stop_requested"
    # the command: exits 128 + SIGUSR2 (as armor.train after its save) once the file exists; a SIGTERM would
    # end it with -15 instead, so the return code tells which way it was asked
    code = (f"import pathlib, sys, time\np = pathlib.Path({str(f)!r})\n"
            "while not p.exists():\n    time.sleep(0.05)\nsys.exit(140)\n")
    monkeypatch.setattr(jobwrap, "_child", subprocess.Popen([sys.executable, "-c", code]))
    assert jobwrap.terminate_child(grace_s=600, stop_file=f) == 128 + signal.SIGUSR2
    # counted interrupted: requeued, not failed
    assert 128 + signal.SIGUSR2 in jobwrap._INTERRUPT_RCS


def test_without_a_stop_file_terminate_child_sends_sigterm(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True:\n    time.sleep(1)\n"])
    monkeypatch.setattr(jobwrap, "_child", child)
    assert jobwrap.terminate_child(grace_s=600) == -signal.SIGTERM

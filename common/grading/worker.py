"""The grading worker process: a fresh interpreter that grades tasks sent over a pipe, one SIGALRM per item.

Started by common.grading.pool (``python -c "from common.grading.worker import _worker_entry; _worker_entry()"
RFD WFD TIMEOUT MEM_MB``), so the caller's ``__main__`` is never re-imported. It dies with its parent
(PR_SET_PDEATHSIG), ignores Ctrl-C (the parent handles it), and runs under an address-space limit, so a huge
allocation becomes a ``MemoryError`` (reason ``"error"``) instead of swapping the machine.
"""
from __future__ import annotations

import os
import signal

from common.grading.verify import TIMEOUT_SEEN, TimeoutMemory, _grade_guarded, _on_alarm


def _set_pdeathsig() -> None:
    """Linux: have the kernel SIGKILL this worker when its parent dies (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _worker_main(read_fd: int, write_fd: int, timeout_s: float, max_memory_mb: int | None) -> None:
    """Worker loop: receive lists of (item_id, answer, gold, type), send (item_id, correct, reason) per item.

    Within one list, an answer that timed out is not graded again (reason "timeout_seen"): the parent, which
    keeps the run's memory of timeouts, sends all the tasks of an answer in flight to one worker.

    Runs in a fresh interpreter started by ``Grader`` (``python -c ...``), so it never re-imports the
    caller's ``__main__`` (no ``if __name__ == "__main__"`` guard needed by users).
    """
    from multiprocessing.connection import Connection

    _set_pdeathsig()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    except Exception:
        pass
    if max_memory_mb:
        try:
            import resource

            lim = int(max_memory_mb) << 20
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                lim = min(lim, hard)
            resource.setrlimit(resource.RLIMIT_AS, (lim, hard))
        except Exception:
            pass
    rconn = Connection(read_fd, writable=False)
    wconn = Connection(write_fd, readable=False)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _on_alarm)
    _grade_guarded("2\\sqrt{3}", "\\sqrt{12}", "math", 60.0)  # import math-verify, warm its caches
    try:
        wconn.send(("ready", os.getpid()))
        while True:
            msg = rconn.recv()
            if msg is None:
                return
            timed_out = TimeoutMemory()
            for iid, ans, gold, atype in msg:
                if ans in timed_out:
                    ok, reason = False, TIMEOUT_SEEN
                else:
                    ok, reason = _grade_guarded(ans, gold, atype, timeout_s)
                    if reason == "timeout":
                        timed_out.add(ans)
                wconn.send((iid, ok, reason))
    except (BrokenPipeError, EOFError, OSError):
        return


def _worker_entry() -> None:
    """``python -c 'from common.grading.worker import _worker_entry;
    _worker_entry()' RFD WFD TIMEOUT MEM_MB``."""
    import sys

    rfd, wfd, t, mem = sys.argv[1:5]
    _worker_main(int(rfd), int(wfd), float(t) or None, int(mem) or None)

"""The grading process pool: ``Grader`` (worker processes, per-item timeouts, in-parent fast paths) and the
shared default graders (``get_grader``, ``close_default_graders``).

Workers (common.grading.worker) are fresh interpreters started with subprocess, talking over pipes. Each arms
its own SIGALRM per item (reason ``"timeout"``, worker survives); the parent additionally kills a worker whose
current item exceeds ``timeout_s + kill_grace_s`` (e.g. stuck inside one C call), respawns it and marks that
item ``"timeout"``; a worker that dies mid-item (OOM killer) marks it ``"error"`` and is replaced.

An answer that timed out, by the worker's alarm or the parent's kill, is remembered by the parent for the
Grader's lifetime (``Grader.timed_out``, a ``TimeoutMemory``) and not graded again against any gold: its
other tasks get ``(False, "timeout_seen")`` without math-verify. So that a timeout is learned before the same
answer starts elsewhere, an answer's tasks in flight are all on one worker, which grades them in order and
skips the rest after a timeout (and has the answer's parse cached); its tasks met meanwhile wait in the
parent until that worker is done with the answer.
"""
from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections import deque
from typing import Sequence

from common.grading.extract import check_mode
from common.grading.grade import ANSWER_TYPES, Verdict, _prepare
from common.grading.scorers import DEFAULT_SCORER, SCORERS, check_scorer
from common.grading.shape import MAX_ANSWER_CHARS
from common.grading.verify import TIMEOUT_SEEN, TimeoutMemory, _grade_inprocess

__all__ = ["Grader", "close_default_graders", "get_grader"]

#: the module whose ``_worker_entry`` a worker process runs
_WORKER_MODULE = "common.grading.worker"


class _Worker:
    __slots__ = ("proc", "send_conn", "conn", "ready", "chunk", "pos", "t_last", "t_spawn")

    def __init__(self, proc, send_conn, recv_conn):
        self.proc = proc  # subprocess.Popen
        self.send_conn = send_conn
        self.conn = recv_conn
        self.ready = False
        self.chunk = None  # list of task ids in flight
        self.pos = 0  # index in chunk of the item being graded
        self.t_last = 0.0  # when the current item started (last progress)
        self.t_spawn = time.monotonic()


_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo


def _spawn_worker(timeout_s: float, max_memory_mb: int | None) -> _Worker:
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    p2c_r, p2c_w = os.pipe()
    c2p_r, c2p_w = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-c", f"from {_WORKER_MODULE} import _worker_entry; _worker_entry()",
           str(p2c_r), str(c2p_w), repr(float(timeout_s)), str(int(max_memory_mb or 0))]
    try:
        proc = subprocess.Popen(cmd, pass_fds=(p2c_r, c2p_w), stdin=subprocess.DEVNULL, env=env,
                                cwd=_PKG_ROOT)
    finally:
        os.close(p2c_r)
        os.close(c2p_w)
    return _Worker(proc, Connection(p2c_w, readable=False), Connection(c2p_r, writable=False))


class Grader:
    """Batch grader with worker processes, per-item timeouts, and in-parent fast paths.

    >>> with Grader(num_workers=2, timeout_s=5.0) as g:
    ...     g.grade(["so \\\\boxed{\\\\frac12}"], ["0.5"])
    [Verdict(correct=True, extracted='\\\\frac12', reason='ok')]

    Args:
        num_workers: worker processes; 0 grades in-process (timeouts only in the main thread; tests/debug).
        timeout_s: per-item time budget. A worker's own SIGALRM stops the item at ``timeout_s``; the parent
            kills and replaces a worker whose item is still running at ``timeout_s + kill_grace_s``.
        mode: default answer mode, a name of ``ANSWER_MODES`` ("boxed" | "answer_line" |
            "boxed_or_answer_line" built in).
        chunk_size: max items sent to a worker at once (throughput; smaller chunks balance better).
        max_answer_chars: longer extracted answers are wrong with reason "implausible" (bound "length"; never
            parsed). The other plausibility bounds are ``BOUNDS``.
        max_memory_mb: address-space limit per worker (None: no limit).
        kill_grace_s: extra time after ``timeout_s`` before the parent kills a worker.
        startup_timeout_s: a worker that is not ready by then is replaced (RuntimeError after 4 failures).
        soft_timeout: arm SIGALRM in the workers (default). False leaves only the parent's kill (tests).
        scorer: a name of ``SCORERS``: "math_verify" (default: the answer mode's answer, math-verify) or
            "math_dapo" (the authors' scorer, decided in the parent; the mode is not read for math items).

    Items decided without math-verify (no answer, integer fast path, multiple choice, implausible) are graded
    in the parent; each distinct (answer, gold, answer type) among the rest is graded once per call, and its
    result, a timeout included, is every duplicate's. An answer that timed out once (``timed_out``, kept
    for the Grader's lifetime: one run) is not tried again against another gold: reason "timeout_seen",
    counted wrong. Workers start lazily on the first call that needs them and are reused; call ``close()``
    (or use ``with``) to stop them.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, mode: str = "boxed", *,
                 chunk_size: int = 32, max_answer_chars: int = MAX_ANSWER_CHARS,
                 max_memory_mb: int | None = 4096,
                 kill_grace_s: float = 1.0, startup_timeout_s: float = 120.0, soft_timeout: bool = True,
                 scorer: str = DEFAULT_SCORER):
        check_mode(mode)
        self.scorer = check_scorer(scorer)
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if not timeout_s or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.num_workers = int(num_workers)
        self.timeout_s = float(timeout_s)
        self.mode = mode
        self.chunk_size = max(1, int(chunk_size))
        self.max_answer_chars = int(max_answer_chars)
        self.max_memory_mb = max_memory_mb
        self.kill_grace_s = float(kill_grace_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.soft_timeout = bool(soft_timeout)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        #: the answers that timed out so far (by the workers' alarm or the parent's kill)
        self.timed_out = TimeoutMemory()
        #: counters: items graded, decided in the parent, of those rejected as implausible, sent to
        #: math-verify (unique), timeouts, unique tasks answered "timeout_seen" (no math-verify), worker kills
        #: and respawns, and the longest time one item took in a worker as seen by the parent (seconds)
        self.stats = {"items": 0, "parent": 0, "implausible": 0, "pool": 0, "timeouts": 0, "timeouts_seen": 0,
                      "kills": 0, "respawns": 0, "max_item_s": 0.0}

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stop the worker processes (idempotent). The grader cannot be used afterwards."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for w in self._workers:
            self._stop_worker(w, graceful=True)
        self._workers = []

    def _spawn(self) -> _Worker:
        return _spawn_worker(self.timeout_s if self.soft_timeout else 0.0, self.max_memory_mb)

    @staticmethod
    def _stop_worker(w: _Worker, graceful: bool = False) -> None:
        try:
            if graceful and w.proc.poll() is None and w.chunk is None:
                try:
                    w.send_conn.send(None)
                    w.proc.wait(timeout=1.0)
                except Exception:
                    pass
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait(timeout=5.0)
        except Exception:
            pass
        for c in (w.send_conn, w.conn):
            try:
                c.close()
            except Exception:
                pass

    # -- grading ----------------------------------------------------------------------------------
    def grade(self, responses: Sequence[str], golds: Sequence, answer_types: Sequence[str] | str = "math",
              mode: str | None = None) -> list[Verdict]:
        """Grade ``responses[i]`` against ``golds[i]``; returns one Verdict per response, in order.

        answer_types: one type for all ("math" | "mc") or one per response. Never raises because of a
        response's content; raises ValueError on mismatched lengths or an unknown mode / answer type.
        """
        if self._closed:
            raise RuntimeError("Grader is closed")
        mode = self.mode if mode is None else mode
        check_mode(mode)
        responses = list(responses)
        golds = list(golds)
        n = len(responses)
        if len(golds) != n:
            raise ValueError(f"responses and golds differ in length: {n} responses, {len(golds)} golds")
        if isinstance(answer_types, str):
            types = [answer_types] * n
        else:
            types = list(answer_types)
            if len(types) != n:
                raise ValueError(f"answer_types has {len(types)} entries for {n} responses")
        for t in set(types):
            if t not in ANSWER_TYPES:
                raise ValueError(f"unknown answer_type {t!r}; expected one of {ANSWER_TYPES}")

        # De-duplication: math-verify's (correct, reason) depends only on the task (cleaned answer,
        # normalized gold, answer type), not on the mode or the rest of the response. Each distinct task
        # is graded once (`tasks`); its result, a timeout included, fans out to the items in `users`,
        # each keeping its own extracted answer (`$x$` and `x` are one task).
        out: list[Verdict | None] = [None] * n
        extracted_of: dict[int, str] = {}
        uniq: dict[tuple[str, str, str], int] = {}  # task -> its index in `tasks`
        tasks: list[tuple[str, str, str]] = []
        users: list[list[int]] = []  # per task: the items that share it
        score_fn = SCORERS[self.scorer].fn          # None: math-verify's path below
        for i in range(n):
            if score_fn is not None and types[i] == "math":
                out[i] = score_fn(responses[i], golds[i])
                continue
            verdict, work = _prepare(responses[i], golds[i], types[i], mode, self.max_answer_chars)
            if verdict is not None:
                out[i] = verdict
                self.stats["implausible"] += verdict.reason == "implausible"
                continue
            extracted, task = work
            extracted_of[i] = extracted
            k = uniq.get(task)
            if k is None:
                k = uniq[task] = len(tasks)
                tasks.append(task)
                users.append([])
            users[k].append(i)
        self.stats["items"] += n
        self.stats["parent"] += n - len(extracted_of)
        if tasks:
            with self._lock:
                results = self._grade_tasks(tasks)
            for k, (ok, reason) in enumerate(results):
                self.stats["timeouts"] += reason == "timeout"
                self.stats["timeouts_seen"] += reason == TIMEOUT_SEEN
                self.stats["pool"] += reason != TIMEOUT_SEEN
                for i in users[k]:
                    out[i] = Verdict(bool(ok), extracted_of[i], reason)
        return out  # type: ignore[return-value]

    def _grade_tasks(self, tasks: list[tuple[str, str, str]]) -> list[tuple[bool, str]]:
        """(correct, reason) per task: an answer that timed out before is (False, "timeout_seen") here; the
        rest is graded in-process (num_workers=0) or by the pool, which add the answers that time out."""
        results: list[tuple[bool, str] | None] = [
            (False, TIMEOUT_SEEN) if t[0] in self.timed_out else None for t in tasks]
        todo = [k for k, r in enumerate(results) if r is None]
        if todo:
            sub = [tasks[k] for k in todo]
            graded = (_grade_inprocess(sub, self.timeout_s, self.timed_out) if self.num_workers == 0
                      else self._grade_pool(sub))
            for k, r in zip(todo, graded):
                results[k] = r
        return results  # type: ignore[return-value]

    def _grade_pool(self, tasks: list[tuple[str, str, str]]) -> list[tuple[bool, str]]:
        results: list[tuple[bool, str] | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        for idx, w in enumerate(self._workers):
            # left over from an interrupted call, or dead
            if w.chunk is not None or w.proc.poll() is not None:
                self._stop_worker(w)
                self._workers[idx] = self._spawn()
                self.stats["respawns"] += 1
        while len(self._workers) < self.num_workers:
            self._workers.append(self._spawn())
        try:
            return self._pool_loop(tasks, results, pending)
        except BaseException:
            # interrupted (Ctrl-C) or failed: workers with work in flight would answer stale items later
            busy = [w for w in self._workers if w.chunk is not None]
            for w in busy:
                self._stop_worker(w)
            self._workers = [w for w in self._workers if w.chunk is None]  # refilled by the next call
            raise

    def _pool_loop(self, tasks, results, pending) -> list[tuple[bool, str]]:
        from multiprocessing.connection import wait

        # chunk so that every worker gets several chunks (load balance), capped by chunk_size
        cs = max(1, min(self.chunk_size, math.ceil(len(tasks) / (4 * self.num_workers))))
        hard = self.timeout_s + self.kill_grace_s
        startup_failures = 0
        remaining = len(tasks)
        memory = self.timed_out
        keys = [TimeoutMemory.key(t[0]) for t in tasks]
        # An answer's tasks in flight are all on one worker (which grades them in order and skips the rest
        # of its chunk after a timeout of that answer; its parse is cached there); a task of an answer in
        # flight elsewhere waits in `held` until that worker is done with the answer.
        owner: dict[str, list[int]] = {}  # answer key -> [worker index, its tasks in flight there]
        held: dict[str, list[int]] = {}  # answer key -> its tasks waiting for the owner

        def settle(iid: int, ok: bool, reason: str) -> None:
            nonlocal remaining
            results[iid] = (bool(ok), reason)
            remaining -= 1
            if reason == "timeout":
                memory.add(tasks[iid][0])

        def leave(iid: int) -> list[int]:
            """Task ``iid`` is no longer in flight; the held tasks of its answer if it was the last one."""
            o = owner[keys[iid]]
            o[1] -= 1
            if o[1] > 0:
                return []
            del owner[keys[iid]]
            return held.pop(keys[iid], [])

        def back_to_queue(iids: list[int]) -> None:
            """Tasks not graded: "timeout_seen" if their answer timed out, else to the front of the queue in
            batch order (the first task of an answer is the one tried)."""
            rest = []
            for j in iids:
                if keys[j] in memory:
                    settle(j, False, TIMEOUT_SEEN)
                else:
                    rest.append(j)
            pending.extendleft(sorted(rest, reverse=True))

        def graded(iid: int, ok: bool, reason: str) -> None:
            settle(iid, ok, reason)
            back_to_queue(leave(iid))

        def requeue(iids: list[int]) -> None:
            """Tasks sent but not graded (a worker gone) go back, with what their answers held."""
            released = [j for iid in iids for j in leave(iid)]
            back_to_queue(list(iids) + released)

        def take(idx: int, size: int) -> list[int]:
            """The next chunk for worker ``idx``: up to ``size`` queued tasks; one of an answer that timed out
            is settled "timeout_seen" here, one of an answer in flight on another worker is held."""
            chunk: list[int] = []
            while pending and len(chunk) < size:
                iid = pending.popleft()
                k = keys[iid]
                if k in memory:
                    settle(iid, False, TIMEOUT_SEEN)
                elif k in owner and owner[k][0] != idx:
                    held.setdefault(k, []).append(iid)
                else:
                    owner.setdefault(k, [idx, 0])[1] += 1
                    chunk.append(iid)
            return chunk

        def replace(idx: int, current_reason: str | None) -> None:
            w = self._workers[idx]
            if w.chunk is not None:
                chunk, pos = w.chunk, w.pos
                w.chunk = None
                if current_reason is not None and pos < len(chunk):
                    graded(chunk[pos], False, current_reason)
                    requeue(chunk[pos + 1:])
                else:
                    requeue(chunk[pos:])
            self._stop_worker(w)
            self._workers[idx] = self._spawn()
            self.stats["respawns"] += 1

        while remaining > 0:
            now = time.monotonic()
            for idx in range(len(self._workers)):
                w = self._workers[idx]
                if w.ready and w.chunk is None and pending:
                    chunk = take(idx, cs)
                    if not chunk:
                        continue
                    try:
                        w.send_conn.send([(iid,) + tasks[iid] for iid in chunk])
                    except Exception:  # the worker is gone: put the chunk back, start another
                        requeue(chunk)
                        replace(idx, None)
                        continue
                    w.chunk, w.pos, w.t_last = chunk, 0, now
            if remaining == 0:  # the last tasks were settled "timeout_seen" by take()
                break
            waiting = [w for w in self._workers if (not w.ready) or w.chunk is not None]
            if not waiting:  # defensive: nothing in flight but items remain -> respawn all
                for idx in range(len(self._workers)):
                    replace(idx, None)
                continue
            deadline = min((w.t_last + hard) if w.ready else (w.t_spawn + self.startup_timeout_s)
                           for w in waiting)
            ready_conns = wait([w.conn for w in waiting], timeout=max(0.0, deadline - time.monotonic()))
            by_conn = {id(w.conn): idx for idx, w in enumerate(self._workers)}
            for conn in ready_conns:
                idx = by_conn.get(id(conn))
                if idx is None:
                    continue
                w = self._workers[idx]
                try:
                    # drain everything available on this pipe
                    while True:
                        msg = conn.recv()
                        if msg[0] == "ready":
                            w.ready = True
                            startup_failures = 0
                        else:
                            iid, ok, reason = msg
                            if w.chunk is not None and w.pos < len(w.chunk) and w.chunk[w.pos] == iid:
                                w.pos += 1
                                graded(iid, ok, reason)
                                t_now = time.monotonic()
                                self.stats["max_item_s"] = max(self.stats["max_item_s"], t_now - w.t_last)
                                w.t_last = t_now
                                if w.pos >= len(w.chunk):
                                    w.chunk = None
                        if not conn.poll():
                            break
                except (EOFError, OSError):
                    # the worker died (e.g. killed by the OOM killer): its current item is an error
                    if not w.ready:
                        startup_failures += 1
                        if startup_failures > 3:
                            raise RuntimeError("grading workers fail to start (died 4 times in a row)")
                    replace(idx, "error" if w.ready else None)
            now = time.monotonic()
            for idx, w in enumerate(self._workers):
                if w.ready and w.chunk is not None and now - w.t_last > hard:
                    if w.conn.poll():
                        continue  # a result arrived meanwhile; read it next round
                    self.stats["kills"] += 1
                    self.stats["max_item_s"] = max(self.stats["max_item_s"], now - w.t_last)
                    replace(idx, "timeout")
                elif not w.ready and now - w.t_spawn > self.startup_timeout_s:
                    startup_failures += 1
                    if startup_failures > 3:
                        raise RuntimeError(f"grading workers did not start within {self.startup_timeout_s}s")
                    replace(idx, None)
        return results  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# module-level default graders
# --------------------------------------------------------------------------------------------------
_DEFAULT_GRADERS: dict[tuple, Grader] = {}
_DEFAULT_LOCK = threading.Lock()


def get_grader(num_workers: int = 2, timeout_s: float = 5.0, mode: str = "boxed",
               scorer: str = DEFAULT_SCORER) -> Grader:
    """A shared Grader for this configuration, created on first use and closed at interpreter exit."""
    key = (int(num_workers), float(timeout_s), mode, scorer)
    with _DEFAULT_LOCK:
        g = _DEFAULT_GRADERS.get(key)
        if g is None or g.closed:
            g = _DEFAULT_GRADERS[key] = Grader(num_workers=num_workers, timeout_s=timeout_s, mode=mode,
                                               scorer=scorer)
        return g


def close_default_graders() -> None:
    """Close every grader made by get_grader (also registered with atexit)."""
    with _DEFAULT_LOCK:
        for g in _DEFAULT_GRADERS.values():
            g.close()
        _DEFAULT_GRADERS.clear()


atexit.register(close_default_graders)

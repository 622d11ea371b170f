"""A small launcher on submitit: jobs are command lines with a stable key, resources, and dependencies.

    from slurm.launcher import Job, Launcher
    jobs = [Job("stage1/dapo/seed0", [sys.executable, "-m", "armor.train", "--config", f], kind="train"),
            Job("peak/dapo/seed0", [...], kind="select_peak", deps=["stage1/dapo/seed0"])]
    Launcher("runs/tiny", cluster="auto").run(jobs)

Backends
  local  the launcher itself runs the jobs in dependency order, at most `workers` at a time, each with
         OMP_NUM_THREADS=ARMOR_THREADS=cores/workers so parallel jobs do not oversubscribe the CPU.
  slurm  every job is an sbatch job made by submitit's SlurmExecutor running `CommandJob` (a
         submitit Checkpointable); dependencies become `--dependency=afterok:ID[:ID...]`; jobs that share
         an `array` tag are one job array (executor.submit_array); every job has `--requeue`.
  auto   slurm when `sbatch` is on PATH and `sinfo` answers, else local.

Gates (`Job.gate = Gate(path, watch)`): a job that may start only once a file exists which another job,
running beside it, makes (a checkpoint). Locally it starts when the path appears; on SLURM it is submitted
held and released by the watched job's wrapper (slurm/jobwrap.py: RELEASES) or by a driver that sees the
path. Nothing polls under a time limit while it waits.

Bookkeeping (ROOT/_jobs/): `state.json` maps each job key to its backend, SLURM job id (or local pid),
submission id and last seen state; `ROOT/_jobs/<key>/` holds `spec.json`, the job wrapper's markers
(`started`, then `finished` / `failed` / `interrupted`, with the exit code; see slurm/jobwrap.py),
`attempts.jsonl`, the command's `log.out` / `log.err`, and on SLURM submitit's files in `submitit/`.
A job's state is read from, in order: its `done` check (outputs exist), the markers of its current
submission, and the scheduler (`squeue --states=all`, which shows finished jobs for MinJobAge; `sacct`
only as a fallback, since clusters without accounting have none). A rerun never submits a job that is
queued, running or done: so the driver is idempotent and resumes after Ctrl-C or SIGKILL.

Requeue and resume: our commands are resumable by rerunning them. On SLURM, (1) time limit: submitit
asks for `--signal=USR2@<signal_delay_s>`; its handler calls `CommandJob.checkpoint()`, which stops the
command (SIGTERM, grace period) and returns the same callable, and submitit runs `scontrol requeue`
(at most `max_requeues` times); (2) preemption / `scontrol requeue` / node failure: SLURM requeues the
job itself (`--requeue`); the wrapper forwards SIGTERM to the command and marks the attempt
`interrupted`. Either way the batch script runs again and the rerun command resumes from its last
checkpoint. Locally, an interrupted job is simply rerun by the next driver invocation.

One module on purpose: the job registry, both backends and the wait loop read and write one state file
under one lock; kept together, that protocol is visible in one place (the job wrapper and the resource
sizes, which need no lock, are slurm/jobwrap.py and slurm/resources.py).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import graphlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from common.jsonl import read_json, write_json_atomic
from slurm import jobwrap, warm
from slurm.resources import NET_ENV, Resources

REPO_ROOT = Path(__file__).resolve().parent.parent

DONE, QUEUED, RUNNING, TODO, FAILED, BLOCKED = "done", "queued", "running", "todo", "failed", "blocked"
ACTIVE = (QUEUED, RUNNING)

_SLURM_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING",
                 "SUSPENDED", "STOPPED", "SPECIAL_EXIT", "RESV_DEL_HOLD"}
_SLURM_RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}


class LauncherError(RuntimeError):
    pass


@dataclass(frozen=True)
class Gate:
    """A job that may start only once `path` exists, which the job `watch` creates while it runs (a
    checkpoint it saves). No polling job and no time limit while it waits: locally the launcher starts it
    when the path appears; on SLURM it is submitted held (`--hold`) and released (`scontrol release`) by the
    watched job's wrapper when the path appears (slurm/jobwrap.py: RELEASES), or by a driver that sees it.
    The watched job failing, or ending without the path, fails it."""
    path: str
    watch: str


@dataclass
class Job:
    """One unit of work. `key` is its identity across driver runs (e.g. "stage1/dapo/seed0")."""
    key: str
    argv: list[str]
    kind: str = "job"                             # a label (the caller's kinds; the driver's: reproduce/)
    deps: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: Optional[str] = None                     # default: the repository root
    resources: Optional[Resources] = None
    launch: str = "plain"                         # "torchrun": ranks per GPU/node on bigger allocations
    array: Optional[str] = None                   # same tag -> one SLURM job array
    done: Optional[Callable[[], bool]] = None     # True when the outputs exist (never resubmitted then)
    description: str = ""
    info: dict = field(default_factory=dict)      # shown by plans (e.g. resolved config overrides)
    cost: float = 0.0                             # estimated work (the caller's unit): local start priority
    gate: Optional[Gate] = None                   # starts only once gate.path exists (a job runs beside)

    def is_done(self) -> bool:
        if self.done is None:
            return False
        try:
            return bool(self.done())
        except Exception:  # a broken check must not stop the driver: the job reruns (idempotent)
            return False


def slurm_error() -> Optional[str]:
    """Why no SLURM scheduler answers here (sbatch or sinfo not on PATH, `sinfo` failing or silent for 10 s),
    or None when one does."""
    missing = [c for c in ("sbatch", "sinfo") if not shutil.which(c)]
    if missing:
        return f"{' and '.join(missing)} not on PATH"
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 10 s"
    except OSError as e:
        return f"sinfo: {e}"
    if r.returncode != 0:
        said = (r.stderr or r.stdout).strip().splitlines()
        return f"sinfo exited {r.returncode}" + (f": {said[-1]}" if said else "")
    return None


def detect_cluster(cluster: str = "auto") -> str:
    if cluster in ("local", "slurm"):
        return cluster
    if cluster != "auto":
        raise LauncherError(f"cluster must be local, slurm or auto, got {cluster!r}")
    return "slurm" if slurm_error() is None else "local"


def topo_order(jobs: list[Job]) -> list[Job]:
    by_key: dict[str, Job] = {}
    for j in jobs:
        if j.key in by_key:
            raise LauncherError(f"duplicate job key {j.key!r}")
        by_key[j.key] = j
    for j in jobs:
        for d in j.deps:
            if d not in by_key:
                raise LauncherError(f"job {j.key!r} depends on unknown job {d!r}")
        if j.gate is not None and (j.gate.watch not in by_key or j.array):
            raise LauncherError(f"job {j.key!r}: its gate watches {j.gate.watch!r}, "
                                + ("which is no job of the plan" if j.gate.watch not in by_key
                                   else "and a gated job cannot be an array task"))
    ts = graphlib.TopologicalSorter({j.key: j.deps for j in jobs})
    try:
        order = list(ts.static_order())
    except graphlib.CycleError as e:
        raise LauncherError(f"dependency cycle: {e.args[1]}") from e
    pos = {j.key: i for i, j in enumerate(jobs)}
    # stable: among equally ready jobs keep the caller's order
    ts = graphlib.TopologicalSorter({j.key: j.deps for j in jobs})
    ts.prepare()
    out: list[Job] = []
    while ts.is_active():
        ready = sorted(ts.get_ready(), key=pos.get)
        for k in ready:
            out.append(by_key[k])
            ts.done(k)
    assert len(out) == len(order)
    return out


def gate_verdict(job: Job, states: dict) -> Optional[tuple[str, str]]:
    """Whether a gated job can no longer start: (BLOCKED, why) when the job it watches failed or was blocked,
    (FAILED, why) when that job is done and the gate's path still does not exist; else None (open, or may
    still open)."""
    g = job.gate
    if g is None:
        return None
    watched = states.get(g.watch, (TODO, ""))[0]     # read before the path: the path comes before the end
    if Path(g.path).exists():
        return None
    if watched in (FAILED, BLOCKED):
        return BLOCKED, f"{g.watch} {watched} before {g.path} existed"
    if watched == DONE:
        return FAILED, f"{g.watch} ended without {g.path}"
    return None


# --------------------------------------------------------------------------------------------- scheduler
def critical_path_order(jobs: list[Job]) -> list[Job]:
    """`jobs` sorted by their longest remaining path, highest first: a job's cost plus the costliest chain of
    jobs that (transitively) depend on it (list scheduling's upward rank); ties keep the given order."""
    children: dict[str, list[str]] = {j.key: [] for j in jobs}
    for j in jobs:
        for d in j.deps:
            if d in children:
                children[d].append(j.key)
    cost = {j.key: max(0.0, float(j.cost)) for j in jobs}
    rank: dict[str, float] = {}
    for j in reversed(topo_order(jobs)):
        rank[j.key] = cost[j.key] + max((rank[c] for c in children[j.key]), default=0.0)
    pos = {j.key: i for i, j in enumerate(jobs)}
    return sorted(jobs, key=lambda j: (-rank[j.key], pos[j.key]))


def slurm_states(job_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """SLURM job id -> (STATE, reason) from squeue (all states, array tasks one per line), then sacct
    for ids squeue does not know. Ids the scheduler has forgotten are absent."""
    ids = sorted({str(i) for i in job_ids if i})
    if not ids:
        return {}
    out: dict[str, tuple[str, str]] = {}
    try:
        r = subprocess.run(["squeue", "-h", "--states=all", "-r", "-o", "%i|%T|%r", "-u", _user()],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            for line in r.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) >= 2:
                    out[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    missing = [i for i in ids if i not in out]
    if missing and shutil.which("sacct"):
        try:
            cmd = ["sacct", "-n", "-P", "-X", "-o", "JobID,State"]
            for i in missing:
                cmd += ["-j", i]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                for line in r.stdout.splitlines():
                    parts = line.strip().split("|")
                    if len(parts) >= 2 and parts[0] in missing:
                        out[parts[0]] = (parts[1].split()[0], "sacct")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {i: out[i] for i in ids if i in out}


def active_jobs() -> list[str]:
    """Jobs the scheduler has not finished (queued or running; COMPLETING ones end within seconds), all users,
    one line each: "JOBID STATE NAME WORKDIR". On a one-node cluster new work waits behind every one of
    them."""
    states = ",".join(sorted((_SLURM_QUEUED | _SLURM_RUNNING) - {"COMPLETING"}))
    r = subprocess.run(["squeue", "-h", "-t", states, "-o", "%i %T %j %Z"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise LauncherError(f"squeue failed: {r.stderr.strip()}")
    return [line.strip() for line in r.stdout.splitlines() if line.strip()]


def _held(job_id: str, name: str) -> bool:
    """Whether SLURM job `job_id` is pending on a user hold under the job name `name`."""
    try:
        r = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%j|%T|%r"], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.stdout.strip().split("|") == [name, "PENDING", "JobHeldUser"]


def _user() -> str:
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", "root")


try:  # submitit is a dependency; slurm.jobwrap stays importable without it
    import submitit
    from submitit.helpers import Checkpointable as _Checkpointable
except ImportError:  # pragma: no cover
    submitit = None
    _Checkpointable = object


class CommandJob(_Checkpointable):
    """The callable submitit runs in a SLURM job: `jobwrap.run_job` on this node (one task per node).
    A submitit Checkpointable: on the timeout/preemption signal submitit calls `checkpoint()`, which stops
    the command and returns this same callable, and requeues the job; the rerun command resumes."""

    def __init__(self, job_dir: str, grace_s: float = 60.0, stop_file: bool = False):
        self.job_dir = str(job_dir)
        self.grace_s = grace_s
        self.stop_file = stop_file          # ask through jobwrap.STOP_FILE first (a command that reads it)

    def __call__(self) -> int:
        env = submitit.JobEnvironment()
        hosts = list(env.hostnames) or [socket.gethostname()]
        port = 29500 + int(str(env.raw_job_id).split("_")[0]) % 2000
        rc = jobwrap.run_job(self.job_dir, node_rank=env.node, nnodes=env.num_nodes, master_addr=hosts[0],
                             master_port=port, slurm_job_id=env.job_id, install_handlers=True)
        if rc != 0:
            raise RuntimeError(f"command exited with {rc}; see {self.job_dir}/log.err")
        return rc

    def checkpoint(self, *args, **kwargs):
        stop_file = Path(self.job_dir) / jobwrap.STOP_FILE if self.stop_file else None
        jobwrap.terminate_child(self.grace_s, stop_file)
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


# --------------------------------------------------------------------------------------------- launcher
class Launcher:
    def __init__(self, root: str | Path, cluster: str = "auto", workers: Optional[int] = None,
                 poll_s: Optional[float] = None, signal_delay_s: int = 90, max_requeues: int = 100,
                 grace_s: float = 60.0, progress: Optional[bool] = None, log: Callable[[str], None] = None,
                 retries: int = 0, warm_start: Optional[bool] = None, preload: Sequence[str] = ()):
        self.root = Path(root).resolve()
        self.jobs_dir = self.root / "_jobs"
        self.cluster = detect_cluster(cluster)
        cores = os.cpu_count() or 1
        self.workers = max(1, workers or cores)
        self.threads = max(1, cores // self.workers)
        self.last_local: Optional[dict] = None   # the last local run's cores: wall, core-seconds, idle ones
        self.poll_s = poll_s if poll_s is not None else (0.2 if self.cluster == "local" else 5.0)
        self.signal_delay_s = signal_delay_s
        self.max_requeues = max_requeues
        self.grace_s = grace_s
        self.retries = retries
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._log = log or (lambda s: print(s, flush=True))
        self._bar = None
        self._registry: dict = {}
        self._completed_seen: dict[str, float] = {}
        self._released: set[str] = set()          # SLURM ids of gated jobs this launcher released
        # local jobs fork from this process with torch & co. imported (slurm/warm.py); ARMOR_WARM=0 turns it
        # off
        self.warm = self.cluster == "local" and (warm.enabled() if warm_start is None else warm_start)
        self.preload = tuple(preload)   # modules a warm launcher imports before its first fork (the caller's)
        self._preloaded = False
        self._lock_fd: Optional[int] = None
        self.marker_grace_s = 60.0

    # ----------------------------------------------------------------------------------- bookkeeping
    def job_dir(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p not in ("", ".", "..")]
        return self.jobs_dir.joinpath(*parts)

    @property
    def registry_path(self) -> Path:
        return self.jobs_dir / "state.json"

    def load_registry(self) -> dict:
        data = read_json(self.registry_path)
        self._registry = data if isinstance(data, dict) else {}
        return self._registry

    def save_registry(self) -> None:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.registry_path, self._registry, **jobwrap.JSON_KW)

    @contextlib.contextmanager
    def lock(self):
        """One driver at a time per root (a second one fails at once instead of double-submitting)."""
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        f = open(self.jobs_dir / ".lock", "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise LauncherError(f"another driver holds {self.jobs_dir / '.lock'} ({f.read().strip()})")
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}")
        f.flush()
        self._lock_fd = f.fileno()   # forked jobs close it: a job outliving the driver must not hold the lock
        try:
            yield
        finally:
            self._lock_fd = None
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    def markers(self, key: str, submission: Optional[str]) -> dict[str, dict]:
        """Markers of one submission: {"started": {...}, "finished"|"failed"|"interrupted": {...}}."""
        out = {}
        d = self.job_dir(key)
        for name in ("started", *jobwrap.END_MARKERS):
            data = read_json(d / name)
            if isinstance(data, dict) and (submission is None or data.get("submission") == submission):
                out[name] = data
        return out

    # ---------------------------------------------------------------------------------------- states
    def job_state(self, job: Job, sched: Optional[dict] = None, just_ended: bool = False) -> tuple[str, str]:
        """(state, detail) of one job now. `sched`: SLURM id -> (STATE, reason), if already queried.
        `just_ended`: the job ended during this driver run (a finished job without outputs is then a
        failure; found later, it is out of date: its inputs changed since, so it runs again)."""
        if job.is_done():
            return DONE, "outputs exist"
        rec = self._registry.get(job.key)
        if not rec:
            return TODO, ""
        m = self.markers(job.key, rec.get("submission"))
        if "finished" in m:
            if job.done is None:
                return DONE, "finished"
            if just_ended or rec.get("state") in ACTIVE:
                return FAILED, "exited 0 but its outputs are missing"
            return TODO, "finished earlier; outputs missing or out of date"
        end = m.get("failed") or m.get("interrupted")
        if rec.get("backend") == "slurm":
            jid = rec.get("job_id")
            if sched is None:
                sched = slurm_states([jid])
            st, reason = sched.get(str(jid), (None, ""))
            if st is not None:
                st = st.split()[0].rstrip("+")
                if st in _SLURM_QUEUED:
                    if "DependencyNeverSatisfied" in reason:
                        return FAILED, f"slurm {jid} {st}: dependency never satisfied"
                    return QUEUED, f"slurm {jid} {st}" + (f" ({reason})" if reason and reason != "None"
                                                          else "")
                if st in _SLURM_RUNNING:
                    return RUNNING, f"slurm {jid} {st}"
                if st == "COMPLETED":  # the marker may lag on a network file system: wait a little
                    first = self._completed_seen.setdefault(job.key, time.time())
                    if time.time() - first < self.marker_grace_s:
                        return RUNNING, f"slurm {jid} COMPLETED, waiting for its finished marker"
                    return FAILED, f"slurm {jid} COMPLETED without a finished marker"
                return FAILED, f"slurm {jid} {st}" + (f", exit {end.get('rc')}" if end else "")
            if end:
                return FAILED, f"{end.get('status')} (exit {end.get('rc')}), slurm {jid}"
            if "started" in m:
                return FAILED, f"slurm {jid} is gone (no end marker)"
            return TODO, f"slurm {jid} unknown to the scheduler"
        # local
        if end:
            return FAILED, f"{end.get('status')} (exit {end.get('rc')})"
        pid, start, host = rec.get("pid"), rec.get("pid_start"), rec.get("host")
        if pid and host == socket.gethostname() and jobwrap.process_alive(int(pid), start):
            return RUNNING, f"local pid {pid}"
        if "started" in m:
            return FAILED, "local job vanished (killed?)"
        return TODO, ""

    def states(self, jobs: list[Job]) -> dict[str, tuple[str, str]]:
        self.load_registry()
        ids = [r.get("job_id") for k, r in self._registry.items() if r.get("backend") == "slurm"]
        sched = slurm_states(ids) if ids and shutil.which("squeue") else {}
        return {j.key: self.job_state(j, sched) for j in jobs}

    # ----------------------------------------------------------------------------------------- run
    def run(self, jobs: list[Job], wait: bool = True) -> dict[str, tuple[str, str]]:
        """Run (local) or submit (slurm) every job that is not done, queued or running; with wait, block
        until all end. Returns key -> (state, detail)."""
        order = topo_order(jobs)
        with self.lock():
            states = self.states(order)
            todo = [j for j in order if states[j.key][0] != DONE]
            if not todo:
                self._log(f"nothing to do: all {len(order)} jobs are done")
                return states
            active = [j for j in todo if states[j.key][0] in ACTIVE]
            self._log(f"{len(order) - len(todo)} of {len(order)} jobs done, {len(active)} queued/running, "
                      f"{len(todo) - len(active)} to {'run' if self.cluster == 'local' else 'submit'} "
                      f"({self.cluster})")
            if self.cluster == "local":
                return self._run_local(order, states, jobs)
            why = slurm_error()
            if why is not None:     # before any submission: one line, not sbatch's traceback
                raise LauncherError(f"cluster slurm: no SLURM scheduler answers here ({why}): nothing "
                                    f"submitted; run on a node of the cluster, or with the local backend "
                                    f"(--cluster local)")
            return self._run_slurm(order, states, wait)

    def _write_spec(self, job: Job) -> str:
        d = self.job_dir(job.key)
        d.mkdir(parents=True, exist_ok=True)
        for name in jobwrap.END_MARKERS:
            (d / name).unlink(missing_ok=True)
        sub = uuid.uuid4().hex[:12]
        res = job.resources or Resources()
        env = self.job_env(job)
        spec = {"key": job.key, "argv": [str(a) for a in job.argv], "kind": job.kind, "env": env,
                "cwd": str(job.cwd or REPO_ROOT), "submission": sub, "launch": job.launch,
                "nodes": res.nodes, "gpus_per_node": res.gpus_per_node, "ranks_per_node": res.ranks_per_node,
                "threads_per_rank": res.threads_per_rank, "deps": job.deps,
                "resources": res.as_dict(), "created": time.time()}
        write_json_atomic(d / "spec.json", spec, **jobwrap.JSON_KW)
        return sub

    def _record(self, key: str, **fields) -> None:
        rec = self._registry.get(key) or {}
        if "job_id" in fields and rec.get("job_id") and rec.get("job_id") != fields["job_id"]:
            rec.setdefault("previous", []).append(rec["job_id"])
        rec.update(fields, updated=time.time())
        self._registry[key] = rec

    def _emit(self, msg: str) -> None:
        if self._bar is not None:
            self._bar.write(msg)
        else:
            self._log(msg)

    def _make_bar(self, total: int, initial: int):
        if not self.progress:
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        tqdm.monitor_interval = 0   # no monitor thread: jobs fork from this process
        return tqdm(total=total, initial=initial, unit="job", dynamic_ncols=True, leave=True)

    # ------------------------------------------------------------------------------------- local
    def _run_local(self, order: list[Job], states: dict, start_order: list[Job]) -> dict:
        """Run the jobs with `self.workers` local processes. Ready jobs start longest remaining path first
        (`critical_path_order`: a job's cost plus the costliest chain of jobs behind it), ties in
        `start_order`, the caller's; `self.last_local` records the cores left idle while jobs remained."""
        procs: dict[str, Optional[subprocess.Popen]] = {}   # None: adopted from a killed driver
        started_at: dict[str, float] = {}
        tries: dict[str, int] = {}
        final: set[str] = {j.key for j in order if states[j.key][0] == DONE}
        for j in order:
            if states[j.key][0] == RUNNING:
                procs[j.key] = None
                started_at[j.key] = time.time()
                tries[j.key] = 1
                self._emit(f"[adopt] {j.key} ({states[j.key][1]})")
        self._bar = self._make_bar(len(order), len(final))
        by_key = {j.key: j for j in order}
        got = {"sig": None}
        start_order = critical_path_order(start_order)
        t_start = t_last = time.time()
        idle = 0.0

        def _on_term(signum, frame):
            got["sig"] = signum
            raise KeyboardInterrupt

        try:
            old = signal.signal(signal.SIGTERM, _on_term)
        except ValueError:  # not the main thread
            old = None
        try:
            while True:
                settled = len(final)
                for key in list(procs):  # reap
                    p = procs[key]
                    if p is not None and p.poll() is None:
                        continue
                    if p is None and self.job_state(by_key[key], {})[0] == RUNNING:
                        continue
                    del procs[key]
                    st, detail = self.job_state(by_key[key], {}, just_ended=True)
                    if st in (RUNNING, TODO):
                        st, detail = FAILED, detail or "the job wrapper exited without an end marker"
                    if st != DONE and tries.get(key, 0) <= self.retries:
                        states[key] = (TODO, f"retrying after: {detail}")
                        self._emit(f"[retry] {key}: {detail}")
                        continue
                    states[key] = (st, detail)
                    final.add(key)
                    self._record(key, state=st, detail=detail)
                    self.save_registry()
                    dt = time.time() - started_at.get(key, time.time())
                    if st == DONE:
                        self._emit(f"[done] {key} ({dt:.1f}s)")
                        if self._bar is not None:
                            self._bar.update(1)
                    else:
                        self._emit(f"[FAILED] {key}: {detail}; log: {self.job_dir(key) / 'log.err'}")
                for j in order:  # jobs behind a failure never run in this invocation
                    if j.key in final or j.key in procs:
                        continue
                    bad = [d for d in j.deps if d in final and states[d][0] in (FAILED, BLOCKED)]
                    # a gate's watched job decided in this invocation (a failure recorded before is retried)
                    shut = (gate_verdict(j, states) if j.gate is not None and j.gate.watch in final
                            and not j.is_done() else None)
                    if bad:
                        states[j.key] = (BLOCKED, f"dependency {bad[0]} {states[bad[0]][0]}")
                    elif shut is not None:
                        states[j.key] = shut
                    if bad or shut is not None:
                        final.add(j.key)
                        label = "FAILED" if states[j.key][0] == FAILED else "blocked"
                        self._emit(f"[{label}] {j.key}: {states[j.key][1]}")
                for j in start_order:  # start what is ready; a gated job once its path exists
                    if len(procs) >= self.workers:
                        break
                    if j.key in final or j.key in procs or not all(states[d][0] == DONE for d in j.deps):
                        continue
                    if j.gate is not None and not Path(j.gate.path).exists() and not j.is_done():
                        continue
                    if j.is_done():
                        states[j.key] = (DONE, "outputs exist")
                        final.add(j.key)
                        if self._bar is not None:
                            self._bar.update(1)
                        continue
                    tries[j.key] = tries.get(j.key, 0) + 1
                    procs[j.key] = self._start_local(j)
                    started_at[j.key] = time.time()
                    states[j.key] = (RUNNING, f"local pid {procs[j.key].pid}")
                    self._emit(f"[start] {j.key}")
                if not procs:
                    if len(final) > settled:   # a pass that only settled jobs (outputs, gates) readies others
                        continue
                    break
                now = time.time()      # cores idle since the last pass, while jobs remain
                idle += (now - t_last) * max(0, self.workers - len(procs)) * self.threads
                t_last = now
                if self._bar is not None:
                    self._bar.set_postfix_str(", ".join(sorted(procs))[:70], refresh=False)
                    self._bar.refresh()
                time.sleep(self.poll_s)
        except KeyboardInterrupt:
            n = len([p for p in procs.values() if p is not None])
            self._emit(f"interrupted ({'SIGTERM' if got['sig'] else 'Ctrl-C'}): stopping {n} running job(s); "
                       f"rerun to resume")
            for p in procs.values():
                if p is not None and p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.send_signal(signal.SIGTERM)
            deadline = time.time() + 15
            for key, p in procs.items():
                while p is not None and p.poll() is None and time.time() < deadline:
                    time.sleep(0.1)
                if p is not None and p.poll() is None:
                    p.kill()
                if p is not None:
                    states[key] = (FAILED, "interrupted by the driver")
                    self._record(key, state=FAILED, detail="interrupted by the driver")
            self.save_registry()
            raise
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
            if self._bar is not None:
                self._bar.close()
                self._bar = None
        self.save_registry()
        wall = time.time() - t_start
        self.last_local = {"workers": self.workers, "threads": self.threads, "wall_s": wall,
                           "core_s": wall * self.workers * self.threads, "idle_core_s": idle}
        return states

    def _start_local(self, job: Job):
        sub = self._write_spec(job)
        d = self.job_dir(job.key)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(d / "wrapper.log", "ab") as wlog:
            if self.warm:   # fork the wrapper from this process, which has torch & co. imported
                if not self._preloaded:
                    missing = warm.preload(self.preload)
                    self._preloaded = True
                    if missing:
                        self._emit(f"[warm] could not preload {', '.join(missing)}")

                def _wrapper(env=env, d=d):
                    os.chdir(REPO_ROOT)
                    os.environ.clear()
                    os.environ.update(env, **{warm.ENV: "1"})
                    return jobwrap.exit_status(jobwrap.run_job(d))

                p = warm.fork(_wrapper, stdout=wlog.fileno(), stderr=wlog.fileno(),
                              close_fds=[self._lock_fd] if self._lock_fd is not None else [])
            else:
                p = subprocess.Popen([sys.executable, "-m", "slurm.jobwrap", str(d)], cwd=str(REPO_ROOT),
                                     env=env, stdout=wlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._record(job.key, backend="local", job_id=str(p.pid), pid=p.pid,
                     pid_start=jobwrap.pid_start_time(p.pid), host=socket.gethostname(), submission=sub,
                     submitted_at=time.time(), state=RUNNING, detail="", kind=job.kind)
        self.save_registry()
        return p

    # ------------------------------------------------------------------------------------- slurm
    def stop_grace(self, job: Job) -> float:
        """Seconds a job's command has, after SLURM's time-limit warning, to finish its step and save."""
        res = job.resources or Resources()
        return max(self.grace_s, res.stop_grace_s or 0.0)

    def command_job(self, job: Job) -> CommandJob:
        """What submitit runs for `job`: its stop grace, and the stop file when its resources give a grace."""
        res = job.resources or Resources()
        return CommandJob(str(self.job_dir(job.key)), self.stop_grace(job), res.stop_grace_s is not None)

    def warning_s(self, job: Job) -> int:
        """`--signal=USR2@N`: the warning comes early enough for the stop grace, SIGTERM's and a margin."""
        res = job.resources or Resources()
        if res.stop_grace_s is None:               # SIGTERM at once, SIGKILL grace_s later
            return self.signal_delay_s
        return max(self.signal_delay_s, int(self.stop_grace(job) + jobwrap.TERM_GRACE_S + 30))

    def slurm_params(self, job: Job, dependency_ids: list[str], n_array: int = 0) -> dict:
        """The submitit SlurmExecutor parameters of one job (or of an array of n_array tasks like it):
        sbatch's options and srun's. srun gets `--cpus-per-task` itself: since SLURM 22.05 a step does not
        inherit the allocation's, and its one task per node would otherwise run every rank on one core; and
        `--kill-on-bad-exit=1`: a node whose task fails (a rank the watchdog ended) ends the step's other
        tasks, instead of leaving them waiting on a collective until the NCCL timeout."""
        res = job.resources or Resources()
        name = job.key.replace("/", ".") if not n_array else f"{job.array}[{n_array}]"
        params = dict(job_name=name[:120], time=int(res.time_min), nodes=res.nodes, ntasks_per_node=1,
                      cpus_per_task=res.cpus_per_task, signal_delay_s=self.warning_s(job),
                      srun_args=[f"--cpus-per-task={res.cpus_per_task}", "--kill-on-bad-exit=1"],
                      setup=[f"export PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}",
                             "export ARMOR_LAUNCHER=slurm"],
                      additional_parameters={"requeue": True, "chdir": str(job.cwd or REPO_ROOT),
                                             **(res.extra or {})})
        if res.gpus_per_node:
            params["gpus_per_node"] = res.gpus_per_node
        if res.mem_gb is not None:
            params["mem"] = f"{int(round(res.mem_gb * 1024))}M"
        for k in ("partition", "account", "qos", "constraint", "exclude"):
            if getattr(res, k):
                params[k] = getattr(res, k)
        if dependency_ids:
            params["dependency"] = "afterok:" + ":".join(dependency_ids)
        if job.gate is not None and not Path(job.gate.path).exists():   # released when the path appears
            params["additional_parameters"]["hold"] = True
        if n_array:
            params["array_parallelism"] = res.array_parallelism
        return params

    def _executor(self, folder: Path, job: Job, dependency_ids: list[str], n_array: int = 0):
        if submitit is None:
            raise LauncherError("submitit is not installed")
        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=self.max_requeues)
        ex.update_parameters(**self.slurm_params(job, dependency_ids, n_array))
        return ex

    def command_lines(self, job: Job, dependency_ids: Optional[list[str]] = None) -> dict[str, str]:
        """What a job runs on SLURM, for plans: `sbatch` (its options as submitit writes them), `srun` (the
        step), and `torchrun` (the command each node runs: `jobwrap.rank_command`), or `command` for a job of
        one rank. <...> marks what is known only when the job runs."""
        from submitit.slurm.slurm import _make_sbatch_string
        params = self.slurm_params(job, dependency_ids if dependency_ids is not None else
                                   [f"<{d}>" for d in job.deps])
        text = _make_sbatch_string(command="<python -u -m submitit.core._submit FOLDER>",
                                   folder=self.job_dir(job.key) / "submitit", **params)
        opts = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
        opts = [o for o in opts if not o.startswith(("--output=", "--error=", "--open-mode="))]
        srun = next(line for line in text.splitlines() if line.startswith("srun "))
        srun = " ".join(w for w in srun.split(" ") if "%j" not in w and w not in ("--output", "--error"))
        out = {"sbatch": "sbatch " + " ".join(opts),
               "srun": srun.replace("<python -u -m submitit.core._submit "
                                                                          "FOLDER>",
                                                                          "<submitit: slurm.jobwrap>")}
        res = job.resources or Resources()
        argv = [str(a) for a in job.argv]
        if job.launch == "torchrun" and res.nodes * res.ranks_per_node > 1:
            argv = jobwrap.rank_command(argv, res.nodes, res.ranks_per_node, "<SLURM_NODEID>" if res.nodes > 1
                                        else 0, "<first host>", "<29500 + job id % 2000>",   # type: ignore
                                        "<KillWait + GraceTime>")
            out["torchrun"] = " ".join(argv)
        else:
            out["command"] = " ".join(argv)
        return out

    def job_env(self, job: Job) -> dict:
        """A job's environment: the network variables set in the driver's environment (resources.NET_ENV), its
        resources' `env`, the job's own; locally also the thread count of one of `workers` parallel jobs, on
        SLURM the node's CPUs divided among its ranks (`Resources.threads_per_rank`)."""
        res = job.resources or Resources()
        env = {k: os.environ[k] for k in NET_ENV if os.environ.get(k)}
        env.update({k: str(v) for k, v in (res.env or {}).items()})
        env.update(job.env)
        threads = self.threads if self.cluster == "local" else res.threads_per_rank
        if self.cluster == "local" or (job.launch == "torchrun" and res.ranks_per_node > 1):
            env.setdefault("ARMOR_THREADS", str(threads))
            env.setdefault("OMP_NUM_THREADS", str(threads))
            env.setdefault("MKL_NUM_THREADS", str(threads))
        return env

    def _run_slurm(self, order: list[Job], states: dict, wait: bool) -> dict:
        # groups in topological order: a single job, or all not-yet-submitted jobs of one array tag
        groups: list[list[Job]] = []
        array_group: dict[str, list[Job]] = {}
        for j in order:
            if states[j.key][0] in (DONE, *ACTIVE):
                continue
            if j.array:
                if j.array not in array_group:
                    array_group[j.array] = []
                    groups.append(array_group[j.array])
                array_group[j.array].append(j)
            else:
                groups.append([j])
        # an array is submitted once all its members' dependencies are submitted: place it after them
        placed: list[list[Job]] = []
        pending = list(groups)
        while pending:
            progress = False
            in_placed = {j.key for g in placed for j in g}
            for g in list(pending):
                keys = {j.key for j in g}
                need = {d for j in g for d in j.deps if d not in keys and states[d][0] not in (DONE, *ACTIVE)}
                if need <= in_placed:
                    placed.append(g)
                    pending.remove(g)
                    progress = True
                    in_placed |= keys
            if not progress:
                raise LauncherError("cannot order job arrays after their dependencies: "
                                    + ", ".join(g[0].array or g[0].key for g in pending))
        n_sub = 0
        for g in placed:
            dep_ids: list[str] = []
            keys = {j.key for j in g}
            for j in g:
                for d in j.deps:
                    if d in keys or states[d][0] == DONE:
                        continue
                    jid = (self._registry.get(d) or {}).get("job_id")
                    if not jid:
                        raise LauncherError(f"{j.key}: dependency {d} has no SLURM job id")
                    if jid not in dep_ids:
                        dep_ids.append(jid)
            subs = [self._write_spec(j) for j in g]
            if len(g) == 1 and not g[0].array:
                j = g[0]
                ex = self._executor(self.job_dir(j.key) / "submitit", j, dep_ids)
                sj = ex.submit(self.command_job(j))
                submitted = [(j, sj.job_id, subs[0])]
            else:
                folder = self.jobs_dir / "_arrays" / f"{g[0].array}-{time.strftime('%Y%m%d-%H%M%S')}"
                ex = self._executor(folder, g[0], dep_ids, n_array=len(g))
                sjs = ex.submit_array([self.command_job(j) for j in g])
                submitted = [(j, sj.job_id, s) for j, sj, s in zip(g, sjs, subs)]
            for j, jid, sub in submitted:
                self._record(j.key, backend="slurm", job_id=str(jid), submission=sub,
                             submitted_at=time.time(), state=QUEUED, detail=f"slurm {jid}", kind=j.kind,
                             host=None, pid=None)
                states[j.key] = (QUEUED, f"slurm {jid}")
                n_sub += 1
                deps = f" after {','.join(dep_ids)}" if dep_ids else ""
                held = ""
                if j.gate is not None:
                    self._add_release(j, str(jid))
                    held = f", held until {j.gate.path} exists ({j.gate.watch} releases it)"
                self._log(f"[submit] {j.key} -> slurm {jid}{deps}{held}")
            self.save_registry()
        if n_sub == 0:
            self._log("nothing submitted: every job not done is already queued or running")
        self._release_gates(order, states)
        if not wait:
            return states
        return self.wait(order, states)

    def _add_release(self, job: Job, job_id: str) -> None:
        """Tell the watched job's wrapper which held job to release when the gate's path appears: its job
        folder's RELEASES file, {gated key: {"job_id", "path"}} (the wrapper rereads it while it runs)."""
        f = self.job_dir(job.gate.watch) / jobwrap.RELEASES
        f.parent.mkdir(parents=True, exist_ok=True)
        table = read_json(f)
        table = table if isinstance(table, dict) else {}
        table[job.key] = {"job_id": job_id, "path": job.gate.path}
        write_json_atomic(f, table, **jobwrap.JSON_KW)

    def _release_gates(self, order: list[Job], states: dict) -> None:
        """Release every held gated job whose path exists: what the watched job's wrapper does, done again by
        any driver that sees it (a wrapper killed first, or a gate submitted after the path appeared). A gate
        whose outputs exist reads done here while its SLURM job may still be held, with dependents waiting on
        it (afterok): it is released too. Tried once per driver run, retried while it reads queued."""
        for j in order:
            rec = self._registry.get(j.key) or {}
            jid = rec.get("job_id")
            if (j.gate is None or states[j.key][0] not in (QUEUED, DONE) or rec.get("backend") != "slurm"
                    or not jid or jid in self._released or not Path(j.gate.path).exists()):
                continue
            if states[j.key][0] == DONE and not _held(jid, self.slurm_params(j, [])["job_name"]):
                self._released.add(jid)          # ran already (or the id is no longer this job's)
                continue
            ok = jobwrap.release_job(jid)
            if ok or states[j.key][0] != QUEUED:
                self._released.add(jid)
            if ok:
                self._emit(f"[release] {j.key} (slurm {jid}): {j.gate.path} exists")

    def wait(self, order: list[Job], states: Optional[dict] = None) -> dict:
        """Poll the scheduler and the markers until every job is done, failed or blocked."""
        states = states or self.states(order)
        n_done = sum(1 for j in order if states[j.key][0] == DONE)
        self._bar = self._make_bar(len(order), n_done)
        last = {k: v[0] for k, v in states.items()}
        try:
            while True:
                ids = [(self._registry.get(j.key) or {}).get("job_id") for j in order
                       if states[j.key][0] in ACTIVE]
                sched = slurm_states(ids)
                for j in order:
                    if states[j.key][0] not in ACTIVE:
                        continue
                    st, detail = self.job_state(j, sched)
                    states[j.key] = (st, detail)
                    if st != last.get(j.key):
                        last[j.key] = st
                        self._record(j.key, state=st, detail=detail)
                        if st == DONE:
                            self._emit(f"[done] {j.key}")
                            if self._bar is not None:
                                self._bar.update(1)
                        elif st == FAILED:
                            self._emit(f"[FAILED] {j.key}: {detail}; log: {self.job_dir(j.key) / 'log.err'}")
                        elif st == RUNNING:
                            self._emit(f"[running] {j.key} ({detail})")
                for j in order:  # a job whose dependency failed (or whose gate cannot open) will never run
                    if states[j.key][0] in ACTIVE:
                        bad = [d for d in j.deps if states[d][0] in (FAILED, BLOCKED)]
                        shut = gate_verdict(j, states) if states[j.key][0] == QUEUED else None
                        if bad or shut is not None:
                            states[j.key] = (BLOCKED, f"dependency {bad[0]} {states[bad[0]][0]}") if bad \
                                else shut
                            self._record(j.key, state=states[j.key][0], detail=states[j.key][1])
                            jid = (self._registry.get(j.key) or {}).get("job_id")
                            if jid and shutil.which("scancel"):
                                subprocess.run(["scancel", str(jid)], capture_output=True)
                            label = "FAILED" if states[j.key][0] == FAILED else "blocked"
                            self._emit(f"[{label}] {j.key}: {states[j.key][1]} (cancelled slurm {jid})")
                self._release_gates(order, states)
                self.save_registry()
                if not any(states[j.key][0] in ACTIVE for j in order):
                    break
                if self._bar is not None:
                    counts = {}
                    for j in order:
                        counts[states[j.key][0]] = counts.get(states[j.key][0], 0) + 1
                    self._bar.set_postfix_str(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
                time.sleep(self.poll_s)
        except KeyboardInterrupt:
            self._emit("stopped waiting (Ctrl-C); the SLURM jobs keep running; rerun the driver to follow "
                       "them")
            self.save_registry()
            raise
        finally:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
        return states

    def cancel(self, keys: Optional[Iterable[str]] = None) -> list[str]:
        """scancel the recorded SLURM jobs (or SIGTERM local wrappers) of these keys (default: all)."""
        self.load_registry()
        done = []
        for key, rec in self._registry.items():
            if keys is not None and key not in set(keys):
                continue
            if rec.get("backend") == "slurm" and rec.get("job_id") and shutil.which("scancel"):
                subprocess.run(["scancel", str(rec["job_id"])], capture_output=True)
                done.append(key)
            elif rec.get("backend") == "local" and rec.get("pid") and rec.get("host") == socket.gethostname():
                if jobwrap.process_alive(int(rec["pid"]), rec.get("pid_start")):
                    os.kill(int(rec["pid"]), signal.SIGTERM)
                    done.append(key)
        return done


def format_states(states: dict[str, tuple[str, str]]) -> str:
    width = max((len(k) for k in states), default=10)
    lines = [f"{k:<{width}}  {s:<8} {d}" for k, (s, d) in states.items()]
    counts: dict[str, int] = {}
    for s, _ in states.values():
        counts[s] = counts.get(s, 0) + 1
    lines.append("total: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm.launcher",
                                 description="Inspect or cancel the jobs a driver recorded under ROOT/_jobs.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("status", help="recorded jobs and their current state")
    s.add_argument("root")
    c = sub.add_parser("cancel", help="cancel recorded queued/running jobs")
    c.add_argument("root")
    c.add_argument("keys", nargs="*")
    args = ap.parse_args(argv)
    la = Launcher(args.root, cluster="local")
    if args.cmd == "status":
        reg = la.load_registry()
        ids = [r.get("job_id") for r in reg.values() if r.get("backend") == "slurm"]
        sched = slurm_states(ids) if ids and shutil.which("squeue") else {}
        states = {k: la.job_state(Job(k, [], done=None), sched) for k in reg}
        print(format_states(states) if states else f"no jobs recorded under {la.jobs_dir}")
        return 0
    print("\n".join(f"cancelled {k}" for k in la.cancel(args.keys or None)) or "nothing to cancel")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The job wrapper: runs one job's command line and leaves marker files the launcher trusts.

Standard library only (it starts in every job). The launcher writes `<job_dir>/spec.json`; this wrapper

  - appends a line to `attempts.jsonl` and writes `started` (submission id, attempt, host, pid),
  - runs the command in the spec's cwd with the spec's environment (threads set from the allocation),
    stdout/stderr appended to `<job_dir>/log.out` / `log.err` (a header line per attempt),
  - on a multi-GPU / multi-node allocation, wraps `python -m MODULE ...` into
    `python -m torch.distributed.run ... -m MODULE ...` (one launcher per node, ranks per GPU),
  - ends by writing exactly one of `finished` (exit code 0), `failed` (exit code != 0) or `interrupted`
    (SIGTERM/SIGINT/preemption/requeue: the job is expected to be rerun and to resume).

From a warm local driver (slurm/warm.py) this wrapper is itself forked, and forks a `python -m` command
instead of starting a new interpreter.

Markers hold JSON with the submission id, so markers of an older submission are never mistaken for the
current one. Locally: `python -m slurm.jobwrap JOB_DIR`. On SLURM the same `run_job()` runs inside a
submitit job (slurm/launcher.py: CommandJob).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from common import cpu_numerics
from common.jsonl import write_json_atomic
from slurm import warm

END_MARKERS = ("finished", "failed", "interrupted")
_INTERRUPT_RCS = {-signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL, -signal.SIGHUP,
                  128 + signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGUSR2}
# in the job folder: the command stops at its next step boundary (armor.stop)
STOP_FILE = "stop_requested"
# in the job folder: held SLURM jobs this job's command opens, {key: {"job_id", "path"}} (launcher.Gate):
# each is released (`scontrol release`) once its path exists; when the command ends, finished or failed,
# those whose path does not exist are cancelled (they would wait forever)
RELEASES = "releases.json"
RELEASE_POLL_S = 2.0
TERM_GRACE_S = 30.0               # after the stop file's grace: SIGTERM, then SIGKILL this much later

JSON_KW = dict(indent=1, sort_keys=True)   # the job folder's marker files
_child: Optional[subprocess.Popen] = None
_interrupted = False


def pid_start_time(pid: int) -> Optional[str]:
    """Start time of a process (field 22 of /proc/PID/stat): with the pid, identifies a process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, start: Optional[str] = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:  # a zombie has exited
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except OSError:
        pass
    return start is None or pid_start_time(pid) == start


def rank_command(argv: list[str], nnodes: int, nproc_per_node: int, node_rank: int = 0,
                 master_addr: Optional[str] = None, master_port: int = 29500,
                 shutdown_timeout: Optional[float] = None) -> list[str]:
    """The command one node runs. World size 1: argv unchanged. Otherwise `python [-m MODULE | SCRIPT] ARGS`
    becomes `python -m torch.distributed.run --nnodes .. --nproc_per_node .. [-m MODULE | SCRIPT] ARGS`
    (torchrun: one process per GPU, RANK/LOCAL_RANK/WORLD_SIZE/MASTER_* set for torch.distributed/FSDP).
    shutdown_timeout: torchrun's `--shutdown-timeout` (seconds from its SIGTERM to the ranks until it
    SIGKILLs them; its own default is 30 s): the cluster's grace (`cluster_grace_s`), so torchrun never
    kills the ranks before SLURM would."""
    nproc = max(1, nproc_per_node)
    if nnodes * nproc <= 1:
        return list(argv)
    python, rest = argv[0], list(argv[1:])
    if nnodes == 1:
        where = ["--standalone"]
    else:
        where = [f"--node_rank={node_rank}", f"--master_addr={master_addr or 'localhost'}",
                 f"--master_port={master_port}"]
    if shutdown_timeout is not None:
        where.append(f"--shutdown-timeout={shutdown_timeout}" if isinstance(shutdown_timeout, str)
                     else f"--shutdown-timeout={max(1, int(round(shutdown_timeout)))}")
    return [python, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc_per_node={nproc}",
            *where, *rest]


def _scontrol_value(args: list[str], key: str) -> Optional[str]:
    """The value of `key` in `scontrol show ARGS` (`Key = value` or `Key=value` forms), or None."""
    try:
        out = subprocess.run(["scontrol", "show", *args], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(rf"(?:^|\s){re.escape(key)}\s*=\s*(\S+)", out)
    return m.group(1) if m else None


def cluster_grace_s(partition: Optional[str] = None) -> Optional[float]:
    """Seconds SLURM lets a job's processes live after its first SIGTERM before the SIGKILL: the partition's
    GraceTime (a preemption moves the job's end that far, slurm.schedmd.com/preempt.html) plus KillWait
    (the SIGTERM -> SIGKILL gap at that end, a time limit, scancel or `scontrol requeue`). None when
    scontrol does not answer. A QOS's GraceTime (accounting) is not read."""
    kill_wait = _scontrol_value(["config"], "KillWait")
    if kill_wait is None or not kill_wait.isdigit():
        return None
    grace = _scontrol_value(["partition", partition], "GraceTime") if partition else None
    return float(kill_wait) + (float(grace) if grace and grace.isdigit() else 0.0)


def _thread_env(env: dict, ranks: int = 1) -> dict:
    """Torch/BLAS thread count: ARMOR_THREADS if the launcher set it, else the SLURM allocation (one task per
    node) divided among the node's `ranks`, so 8 ranks on a 64-core node start 8 threads each, not 64."""
    threads = env.get("ARMOR_THREADS")
    if not threads and env.get("SLURM_CPUS_PER_TASK"):
        threads = str(max(1, int(env["SLURM_CPUS_PER_TASK"]) // max(1, ranks)))
    if threads:
        env.setdefault("ARMOR_THREADS", str(threads))
        env.setdefault("OMP_NUM_THREADS", str(threads))
        env.setdefault("MKL_NUM_THREADS", str(threads))
    return env


def _on_signal(signum, frame, previous=None):
    global _interrupted
    _interrupted = True
    if _child is not None and _child.poll() is None:
        try:
            _child.send_signal(signal.SIGTERM if signum != signal.SIGINT else signal.SIGINT)
        except ProcessLookupError:
            pass
    if callable(previous) and previous not in (signal.SIG_IGN, signal.SIG_DFL):
        previous(signum, frame)


def terminate_child(grace_s: float = 60.0, stop_file: Optional[Path] = None) -> Optional[int]:
    """Ask the running command to stop, used on preemption/timeout: create `stop_file` (the trainer saves at
    its next step boundary and exits, armor.stop) and wait grace_s, then SIGTERM and, TERM_GRACE_S later,
    SIGKILL. Without a stop file: SIGTERM, then SIGKILL after grace_s."""
    global _interrupted
    _interrupted = True
    child = _child
    if child is None:
        return None
    waits = [(None, grace_s), (child.terminate, TERM_GRACE_S)] if stop_file else [(child.terminate, grace_s)]
    if stop_file:
        Path(stop_file).touch()
    for ask, wait_s in waits:
        if child.poll() is not None or not process_alive(child.pid):
            break
        if ask is not None:
            try:
                ask()
            except ProcessLookupError:
                pass
        deadline = time.time() + wait_s
        while time.time() < deadline and child.poll() is None and process_alive(child.pid):
            time.sleep(0.2)
    else:
        if child.poll() is None:
            try:
                child.kill()
            except ProcessLookupError:
                pass
    return child.returncode


def release_job(job_id: str) -> bool:
    """`scontrol release JOB_ID` (a held job may start; a running one is left as it is): whether it
    succeeded."""
    try:
        return subprocess.run(["scontrol", "release", str(job_id)], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _gates(job_dir: Path) -> dict:
    try:
        table = json.loads((job_dir / RELEASES).read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def open_gates(job_dir: Path, released: set, log) -> None:
    """Release the held jobs of JOB_DIR/RELEASES whose path exists (once each: ids in `released`)."""
    for key, g in _gates(job_dir).items():
        jid = str(g.get("job_id"))
        if jid not in released and g.get("path") and Path(g["path"]).exists() and release_job(jid):
            released.add(jid)
            log(f"released {key} (slurm {jid}): {g['path']} exists")


def close_gates(job_dir: Path, released: set, log) -> None:
    """Cancel the held jobs of JOB_DIR/RELEASES whose path does not exist: the command has ended (finished or
    failed) without making it, so they would wait forever (their dependents end with them)."""
    for key, g in _gates(job_dir).items():
        jid = str(g.get("job_id"))
        if jid in released or (g.get("path") and Path(g["path"]).exists()):
            continue
        try:
            subprocess.run(["scancel", jid], capture_output=True, timeout=60)
            log(f"cancelled {key} (slurm {jid}): this job ended without {g.get('path')}")
        except (OSError, subprocess.TimeoutExpired):
            pass


def _ignore_usr_signals():  # in the child: the preemption signal is for the wrapper, not the command
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def run_job(job_dir: str | Path, node_rank: int = 0, nnodes: int = 1, master_addr: Optional[str] = None,
            master_port: int = 29500, slurm_job_id: Optional[str] = None,
            install_handlers: bool = True) -> int:
    """Run the job described by JOB_DIR/spec.json; returns the command's exit code (negative: signal)."""
    global _child, _interrupted
    cpu_numerics.pin()   # a job starts here: its command inherits the pins (common/cpu_numerics.py)
    job_dir = Path(job_dir)
    spec = json.loads((job_dir / "spec.json").read_text())
    sub = spec["submission"]
    leader = node_rank == 0
    attempts_file = job_dir / "attempts.jsonl"
    attempt = 1 + (sum(1 for line in attempts_file.read_text().splitlines() if sub in line)
                   if attempts_file.exists() else 0)
    if not leader and slurm_job_id:
        # another node: the leader may have appended this attempt's line already; SLURM counts requeues
        attempt = 1 + int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    info = {"submission": sub, "attempt": attempt, "host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": pid_start_time(os.getpid()), "time": time.time(), "slurm_job_id": slurm_job_id,
            "node_rank": node_rank, "node": os.environ.get("SLURMD_NODENAME")}
    if leader:
        for name in END_MARKERS + (STOP_FILE,):
            (job_dir / name).unlink(missing_ok=True)
        with open(attempts_file, "a") as f:
            f.write(json.dumps(info) + "\n")
        write_json_atomic(job_dir / "started", info, **JSON_KW)

    env = dict(os.environ)
    env.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
    env["ARMOR_JOB_KEY"] = spec["key"]
    env["ARMOR_JOB_DIR"] = str(job_dir)
    env["ARMOR_STOP_FILE"] = str(job_dir / STOP_FILE)      # armor.stop.STOP_FILE_ENV: read at step boundaries
    argv = list(spec["argv"])
    ranks = 1
    if spec.get("launch") == "torchrun":
        ranks = int(spec.get("ranks_per_node") or spec.get("gpus_per_node") or 0)   # older specs: per GPU
        # on SLURM torchrun waits for its ranks as long as the cluster does (KillWait + GraceTime)
        grace = cluster_grace_s(os.environ.get("SLURM_JOB_PARTITION")) if slurm_job_id else None
        argv = rank_command(argv, nnodes, ranks, node_rank, master_addr, master_port, grace)
        ranks = max(1, ranks) if nnodes * max(1, ranks) > 1 else 1
    env = _thread_env(env, ranks)
    suffix = "" if leader else f".node{node_rank}"
    out = open(job_dir / f"log{suffix}.out", "ab", buffering=0)
    err = open(job_dir / f"log{suffix}.err", "ab", buffering=0)
    where = info["host"] + (f" (node {info['node']})" if info["node"] else "")   # nodes may share a hostname
    header = (f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} attempt {attempt} on {where} "
              f"(submission {sub}{', slurm job ' + slurm_job_id if slurm_job_id else ''}): "
              f"{' '.join(argv)}\n").encode()
    out.write(header)
    err.write(header)

    previous = {}
    if install_handlers:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            prev = signal.getsignal(s)
            previous[s] = prev
            signal.signal(s, lambda n, f, _p=prev: _on_signal(n, f, _p))
    _interrupted = False
    rc: Optional[int] = None
    status = "interrupted"
    t0 = time.time()
    gates, released = False, set()
    try:
        mod = warm.python_module(argv) if warm.active() else None
        if mod is not None:   # forked from a warm driver: run `python -m MODULE` without a new interpreter
            _child = warm.fork(lambda: _ignore_usr_signals()
                               or warm.run_module_here(*mod, spec.get("cwd"), env),
                               stdout=out.fileno(), stderr=err.fileno())
        else:
            _child = subprocess.Popen(argv, cwd=spec.get("cwd") or None, env=env, stdout=out, stderr=err,
                                      stdin=subprocess.DEVNULL, preexec_fn=_ignore_usr_signals)
        gates = leader and bool(slurm_job_id)      # on SLURM the leader opens the held jobs this job makes
        next_gate = 0.0
        while True:
            rc = _child.poll()
            if rc is not None:
                break
            if gates and time.time() >= next_gate:
                open_gates(job_dir, released, _wrap_log(out))
                next_gate = time.time() + RELEASE_POLL_S
            time.sleep(0.1)
        if gates:
            open_gates(job_dir, released, _wrap_log(out))
        if rc == 0:
            status = "finished"
        elif _interrupted or rc in _INTERRUPT_RCS:
            status = "interrupted"
        else:
            status = "failed"
        return rc
    except FileNotFoundError as e:  # the command does not exist: a failure, not an interruption
        err.write(f"{e}\n".encode())
        rc, status = 127, "failed"
        return rc
    finally:  # also on SystemExit from submitit's requeue handler: the job is interrupted
        if _child is not None:
            if _child.poll() is None:
                terminate_child(30.0)
            if rc is None:
                rc = _child.returncode
        _child = None
        if gates and status in ("finished", "failed"):
            close_gates(job_dir, released, _wrap_log(out))
        tail = f"=== exit {rc} ({status}) after {time.time() - t0:.1f}s\n".encode()
        out.write(tail)
        out.close()
        err.close()
        if leader:
            write_json_atomic(job_dir / status, {**info, "rc": rc, "status": status, "end": time.time()},
                              **JSON_KW)
        for s, prev in previous.items():
            try:
                signal.signal(s, prev)
            except (TypeError, ValueError):
                pass


def _wrap_log(out):
    """A line logger into the job's log.out, marked as the wrapper's."""
    def log(msg: str) -> None:
        out.write(f"[jobwrap {time.strftime('%H:%M:%S')}] {msg}\n".encode())
    return log


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m slurm.jobwrap JOB_DIR", file=sys.stderr)
        return 2
    return exit_status(run_job(args[0]))


def exit_status(rc: int) -> int:
    """run_job's result as a process exit status (killed by signal N -> 128 + N, as a shell reports it)."""
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())

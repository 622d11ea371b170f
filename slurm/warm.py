"""Warm starts for local jobs: fork a process that already has torch and transformers imported.

On a 2-core CPU a fresh interpreter spends seconds importing torch and transformers (`python -X importtime
-c "import armor.trainer"`), more than a smoke job's own work. With warm starts the local launcher imports the
modules its caller names once (`preload`: Launcher(preload=...); the driver names its jobs' heavy modules),
forks each job's wrapper (slurm/jobwrap.py), and the wrapper forks the job's `python -m MODULE ARGS` command,
which then runs MODULE with runpy in the forked process (`fork_module`): same argv, cwd, environment, log
files and exit code as a subprocess, without the import time. Nothing has run a torch op in the driver, so no
thread pool is copied.

Only commands of the form `[sys.executable, "-m", MODULE, ...]` are forked; anything else (a script, another
program, a replaced entry point) starts as a subprocess, as do all jobs on SLURM. ARMOR_WARM=0 turns warm
starts off; the forked processes carry ARMOR_WARM=1 so that their own python commands fork too.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
import time
import traceback
import warnings
from typing import Optional, Sequence

ENV = "ARMOR_WARM"


def enabled() -> bool:
    """Warm starts are on unless ARMOR_WARM=0 (fork is POSIX only)."""
    return hasattr(os, "fork") and os.environ.get(ENV, "1") != "0"


def active() -> bool:
    """True in a process forked warm (its python commands can fork too)."""
    return os.environ.get(ENV) == "1" and hasattr(os, "fork")


def preload(modules: Sequence[str]) -> list[str]:
    """Import the caller's heavy modules once, before forking; returns those that could not be imported."""
    import importlib
    missing = []
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError:
            missing.append(m)
    return missing


def python_module(argv: Sequence[str]) -> Optional[tuple[str, list[str]]]:
    """(MODULE, ARGS) when argv is `<this python> -m MODULE ARGS...`, else None."""
    if len(argv) < 3 or argv[1] != "-m":
        return None
    try:
        same = os.path.samefile(argv[0], sys.executable)
    except OSError:
        same = False
    return (argv[2], list(argv[3:])) if same else None


class Forked:
    """The parent's handle on a forked child, with the part of subprocess.Popen the launcher uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:   # reaped elsewhere: report a failure rather than hang
                self.returncode = 255
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)   # -N when killed by signal N
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if deadline is not None and time.time() > deadline:
                return None
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _child_exit(code) -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:  # noqa: BLE001 - the process ends either way
            pass
    os._exit(code)


def fork(target, *, stdout: Optional[int] = None, stderr: Optional[int] = None,
         close_fds: Sequence[int] = ()) -> Forked:
    """Run `target()` in a forked child with default signal handlers; its return value (or SystemExit code)
    is the exit code. stdout / stderr: file descriptors the child's 1 / 2 become; close_fds: descriptors the
    child must not keep open (a lock the parent holds)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:   # an ignored Ctrl-C stays ignored, as in a
            signal.signal(signal.SIGINT, signal.default_int_handler)  # fresh interpreter
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if stdout is not None:
            os.dup2(stdout, 1)
        if stderr is not None:
            os.dup2(stderr, 2)
        # fresh text streams on fds 1 / 2 (the parent's may be replaced objects, e.g. under pytest's capture)
        sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                                           closefd=False)
        os.environ[ENV] = "1"
        rc = target()
        code = rc if isinstance(rc, int) else 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - report and exit like an interpreter would
        traceback.print_exc()
        code = 1
    finally:
        _child_exit(code & 0xFF if code >= 0 else 1)
    raise AssertionError("not reached")


def run_module_here(module: str, args: Sequence[str], cwd: Optional[str] = None,
                    env: Optional[dict] = None) -> int:
    """`python -m MODULE ARGS` in this process (call it in a forked child): argv, cwd, environment and torch's
    thread count set as a fresh interpreter would have them."""
    if cwd:
        os.chdir(cwd)
    if env is not None:
        keep = os.environ.get(ENV)
        os.environ.clear()
        os.environ.update(env)
        if keep is not None:
            os.environ[ENV] = keep
    threads = os.environ.get("OMP_NUM_THREADS") or os.environ.get("ARMOR_THREADS")
    if threads and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    sys.path.insert(0, os.getcwd())
    sys.argv = [module, *args]
    # a preloaded module run as __main__ is a second copy, exactly as with `python -m` in a cold process
    warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                            category=RuntimeWarning)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def fork_module(module: str, args: Sequence[str], *, cwd: Optional[str] = None, env: Optional[dict] = None,
                stdout: Optional[int] = None, stderr: Optional[int] = None) -> Forked:
    """Like subprocess.Popen([python, -m, MODULE, *ARGS], cwd, env, stdout, stderr) on a warm process."""
    return fork(lambda: run_module_here(module, args, cwd, env), stdout=stdout, stderr=stderr)


def run(argv: Sequence[str]) -> int:
    """subprocess.run(argv).returncode, forked warm when this process is warm and argv is `python -m ...`."""
    mod = python_module(argv) if active() else None
    if mod is None:
        import subprocess
        return subprocess.run(list(argv)).returncode
    return fork_module(*mod).wait()


def exec_or_run(argv: Sequence[str]) -> int:
    """os.execvp(argv) in a cold process; in a warm one, a `python -m` command runs right here (the process
    is already the job's own: exec would only throw the imports away)."""
    sys.stdout.flush()
    sys.stderr.flush()
    mod = python_module(argv) if active() else None
    if mod is None:
        os.execvp(argv[0], list(argv))
    return run_module_here(*mod)

"""Shared pytest fixtures. Keep this minimal.

`slurm` marker: tests that need the local SLURM cluster (bash slurm/cluster_up.sh); skipped when `sbatch` is
not on PATH. The `slurm_cluster` fixture checks that the scheduler answers and that no other work is queued on
the one node (the tests' jobs would wait behind it: a CI run once timed out behind jobs recovered from an old
controller state), and returns the default partition. ARMOR_SLURM_SHARED=1 lets the tests share the node (they
wait their turn; used when two test loops run side by side).
"""
import os
import shutil
import subprocess

import pytest

from common import cpu_numerics

cpu_numerics.pin()   # before any test module imports torch: in-process tests compute as the jobs they spawn


def pytest_collection_modifyitems(config, items):
    if shutil.which("sbatch") is None:
        skip = pytest.mark.skip(reason="sbatch not on PATH (start a cluster with: bash slurm/cluster_up.sh)")
        for item in items:
            if "slurm" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def slurm_cluster():
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"SLURM does not answer ({e}); run: bash slurm/cluster_up.sh")
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip(f"SLURM does not answer ({r.stderr.strip()}); run: bash slurm/cluster_up.sh")
    parts = [line.split() for line in r.stdout.splitlines() if line.strip()]
    default = next((p[0].rstrip("*") for p in parts if p[0].endswith("*")), parts[0][0])
    if os.environ.get("ARMOR_SLURM_SHARED") != "1":
        from slurm.launcher import active_jobs
        others = active_jobs()
        if others:
            pytest.fail(f"the SLURM queue already holds {len(others)} job(s) the tests' jobs would wait "
                        f"behind (first: {others[0]!r}); scancel them, or restart the test cluster with "
                        f"bash slurm/cluster_down.sh && bash slurm/cluster_up.sh (it starts with an empty "
                        f"queue), or set ARMOR_SLURM_SHARED=1 to share the node", pytrace=False)
    return default


def _wait_until(cond, what: str, proc=None, poll_s: float = 0.05):
    """Poll `cond()` until it is true. No deadline of its own (a slow machine only makes it slower): pytest's
    timeout bounds the test; it fails at once, with the process's output, when `proc` exits first."""
    import time
    while not cond():
        if proc is not None and proc.poll() is not None and not cond():
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"{what}: the process exited (rc {proc.returncode}) first\n{out}")
        time.sleep(poll_s)


@pytest.fixture
def wait_until():
    """`wait_until(cond, what, proc=None)`: wait for an event the test controls, never for a wall-clock
    time."""
    return _wait_until


# ---- the smoke world (quick SFT, seconds), built once per machine and cached (owner: trainer tests) ----
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ARMOR_PROGRESS", "0")
# every test runs offline (nothing asks the hub, even for sizes)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# a child crashing in native code (a SIGSEGV in a gloo rank was seen once) prints every thread's Python stack
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


@pytest.fixture(scope="session")
def world() -> Path:
    """The tiny world built with --quick: same code path as the real one, a seconds-long SFT."""
    from reproduce.toy.build import build_world
    import shutil
    out = Path(os.environ.get("ARMOR_TEST_WORLD", ROOT / "runs" / "_cache" / "world_quick"))
    try:
        return Path(build_world(out, seed=0, quick=True, log=lambda *a, **k: None))
    except FileExistsError:   # a cache left by an older world definition: it is only a cache, rebuild it
        shutil.rmtree(out)
        return Path(build_world(out, seed=0, quick=True, log=lambda *a, **k: None))


# ---- the fake GPU vLLM (tests/fake_vllm; why a fake: tests/integration/test_vllm_engine.py's docstring) --
@pytest.fixture()
def vllm(monkeypatch):
    """The fake vllm on sys.path, its call log empty, torchrun's variables set (as one rank of a job)."""
    import sys
    fake_dir = Path(__file__).resolve().parent / "fake_vllm"
    monkeypatch.syspath_prepend(str(fake_dir))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    import vllm as fake
    assert fake.__file__.startswith(str(fake_dir))
    fake.CALLS.clear()
    monkeypatch.setattr(fake.platforms, "SLEEP_MODE", True)     # the GPU build's platform
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    return fake

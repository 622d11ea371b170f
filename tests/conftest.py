"""Shared pytest fixtures. Keep this minimal.

`slurm` marker: tests that need the local SLURM cluster (bash slurm/cluster_up.sh); skipped when `sbatch` is
not on PATH. The `slurm_cluster` fixture checks that the scheduler answers and returns its default partition.
"""
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
    return default


# ---- the smoke world (quick SFT, seconds), built once per machine and cached (owner: trainer tests) ----
import os  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ARMOR_PROGRESS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")   # every test runs offline (nothing asks the hub, even for sizes)
# a child that crashes in native code (a SIGSEGV in a gloo rank was seen once) prints every thread's Python stack
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

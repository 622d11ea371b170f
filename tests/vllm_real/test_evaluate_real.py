"""eval.evaluate with the real vLLM engine (its CPU build, float32 by the one dtype rule): greedy samples
equal the HF engine's sample for sample, split over 2 ranks and (under -m slow) on one process: one process
is test_arch_real.py::test_vllm_greedy_equals_hf_on_the_paper_layouts, on both paper layouts."""
import shutil
from pathlib import Path

import pytest
from tier_runs import evaluate, sample_rows

N = 64


@pytest.fixture(scope="module")
def ckpt(vllm_world, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ck") / "step_000003"
    shutil.copytree(vllm_world / "base_model", d)
    return d


@pytest.fixture(scope="module")
def hf(ckpt, vllm_world, tmp_path_factory) -> list[dict]:
    return evaluate(ckpt, vllm_world, tmp_path_factory.mktemp("hf"), "hf", n=N)


@pytest.mark.parametrize("ranks", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_vllm_greedy_equals_hf_sample_for_sample(ranks, ckpt, vllm_world, hf, tmp_path):
    got = evaluate(ckpt, vllm_world, tmp_path / "vllm", "vllm", ranks, n=N)
    assert len(got) == len(hf) == N
    assert sample_rows(got) == sample_rows(hf)

"""eval.evaluate with the real vLLM engine (its CPU build, float32 by the one dtype rule): greedy samples
equal the HF engine's sample for sample, on one process and split over 2 ranks."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
N = 64


@pytest.fixture(scope="module")
def ckpt(vllm_world, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ck") / "step_000003"
    shutil.copytree(vllm_world / "base_model", d)
    return d


def evaluate(ckpt: Path, world: Path, out: Path, engine: str, ranks: int = 1) -> list[dict]:
    launch = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                                 if ranks > 1 else [])
    cmd = [*launch, "-m", "eval.evaluate", "--checkpoint", str(ckpt), "--protocol", "greedy",
           "--limit", str(N), "--benchmarks", f"toy_test={world / 'data' / 'test.jsonl'}", "--engine", engine,
           "--enforce-eager", "--chunk-size", "16", "--grader-workers", "0", "--no-progress",
           "--out", str(out)]
    env = {**os.environ, "ARMOR_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    f = out / ckpt.name / "toy_test__greedy__k1.samples.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def hf(ckpt, vllm_world, tmp_path_factory) -> list[dict]:
    return evaluate(ckpt, vllm_world, tmp_path_factory.mktemp("hf"), "hf")


@pytest.mark.parametrize("ranks", [1, 2])
def test_vllm_greedy_equals_hf_sample_for_sample(ranks, ckpt, vllm_world, hf, tmp_path):
    got = evaluate(ckpt, vllm_world, tmp_path / "vllm", "vllm", ranks)
    assert len(got) == len(hf) == N
    keys = ("index", "sample", "response", "extracted", "correct", "length", "finished")
    assert [[r[k] for k in keys] for r in got] == [[r[k] for k in keys] for r in hf]

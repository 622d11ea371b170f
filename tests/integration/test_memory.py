"""The per-rank memory estimate (armor.memory) and the GPU check's CPU run (bench.gpu_check --tiny)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from armor import memory
from armor.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_parameter_count_is_the_models():
    """ModelShape.params counts what transformers builds (Qwen2 layout), and the 7B's is the published 7.62B."""
    from bench.gpu_check import TINY, build_model
    model = build_model(TINY, TINY.layers, 64, torch.device("cpu"))
    assert sum(p.numel() for p in model.parameters()) == TINY.params
    assert memory.KNOWN["Qwen/Qwen2.5-Math-7B"].params == 7_615_616_512
    assert memory.ModelShape.from_config(model.config.to_dict()) == TINY


def test_estimate_by_hand():
    """W = 4 ranks, P = TINY.params: fp32 shards, fp32 grads, two fp32 moments, a bf16 reference shard."""
    from bench.gpu_check import TINY
    cfg = load_config(ROOT / "reproduce" / "presets" / "qwen25-math-7b.yaml",
                      ["batch.micro_batch_tokens=20480", "batch.logprob_chunk_tokens=1024"])
    est = memory.estimate(cfg, 4, TINY)
    P, G = TINY.params, 2 ** 30
    assert est["params"] == pytest.approx(P / 4 * 4 / G) and est["optimizer"] == pytest.approx(P / 4 * 8 / G)
    assert est["reference"] == pytest.approx(P / 4 * 2 / G)
    assert est["logprobs"] == pytest.approx(1024 * TINY.vocab * 14 / G)
    unchunked = memory.estimate(load_config(ROOT / "reproduce" / "presets" / "qwen25-math-7b.yaml",
                                            ["batch.micro_batch_tokens=20480", "batch.logprob_chunk_tokens=null"]),
                                4, TINY)
    assert unchunked["logprobs"] == pytest.approx(20480 * TINY.vocab * 14 / G)
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"))


def test_gpu_check_runs_on_cpu(tmp_path):
    """The GPU check's code on CPU with tiny widths: every phase reports, chunked log-probs equal the full ones,
    and the vLLM part says it was skipped (no GPU: CUDA_VISIBLE_DEVICES empty; vllm importable or not)."""
    r = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--out", str(tmp_path), "--tiny", "--device", "cpu",
                        "--prompt", "16", "--response", "96", "--chunk", "40", "--steps", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(rep["phases"]) == {"logprobs_full", "logprobs_chunked", "update", "checkpoint"}
    assert rep["phases"]["logprobs_chunked"]["max_abs_diff_to_full"] < 1e-5
    assert rep["phases"]["update"]["tokens_per_s"] > 0
    assert rep["vllm"]["vllm"].startswith("skipped: ") and "update" in r.stdout
    assert rep["ok"] is None and "result: no pass/fail check ran" in r.stdout
    assert (tmp_path / "model" / "config.json").is_file()

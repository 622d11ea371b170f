"""The GPU check's vLLM part (bench.vllm_check) against the fake `vllm` (tests/fake_vllm/vllm), and its gate
in bench.gpu_check: on a machine without a GPU the part is skipped, with the reason, even when vllm imports.

The fake's log-probs are not a model's, so its mismatch to the HF model is large: these tests check the
fields and that vllm_ok follows the bound; tests/vllm_real/test_gpu_check_real.py checks the numbers with
real vLLM."""
import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parents[1] / "fake_vllm"


def weights_only(world: Path, tmp_path: Path) -> Path:
    """A copy of the tiny base model's folder without its tokenizer files (as the GPU check's folder)."""
    d = tmp_path / "model"
    shutil.copytree(world / "base_model", d)
    for f in d.glob("tokenizer*"):
        f.unlink()
    return d


@pytest.mark.parametrize("folder", ["tiny model", "weights only"])
def test_gpu_check_part_runs_against_the_fake(folder, vllm, world, tmp_path):
    """bench.gpu_check calls vllm_check on a folder of config.json + weights (no tokenizer) with its sizes."""
    from bench.vllm_check import vllm_check
    path, out = world / "base_model", {"before": 1}
    if folder == "weights only":
        path, out = weights_only(world, tmp_path), {"before": 1, "prompt": 8, "response": 24}
    out = vllm_check(str(path), out, device="cpu")
    assert out["before"] == 1 and out["vllm"] == "0.33.0" and out["vllm_pushes"] == 3
    assert out["vllm_unchanged_version_pushed"] is False and len(out["vllm_push_s"]) == 3
    assert out["vllm_swap_back_same_tokens"] is True and out["vllm_reference_differs"] is True
    assert out["vllm_generate_tokens_per_s"] > 0
    # the fake's log-probs are not the model's: far above bf16's bound, so the check fails
    assert out["vllm_dtype"] == "bfloat16" and out["vllm_logprob_mismatch_bound"] == 0.1
    assert out["vllm_logprob_mismatch"] > out["vllm_logprob_mismatch_bound"] and out["vllm_ok"] is False


@pytest.mark.parametrize("dtype,mismatch,ok", [("bfloat16", 0.05, True), ("bfloat16", 0.2, False),
                                               ("float32", 1e-6, True), ("float32", 0.05, False),
                                               ("float32", float("nan"), False)])
def test_vllm_ok_is_the_mismatch_against_its_dtypes_bound(dtype, mismatch, ok, vllm, world, monkeypatch):
    """vllm_ok: the token signals pass and the mismatch is within armor.health's bound (bf16 0.1, fp32
    1e-3)."""
    import bench.vllm_check as V
    monkeypatch.setattr(V, "_hf_mismatch", lambda model, ro: mismatch)
    out = V.vllm_check(str(world / "base_model"), {"prompt": 8, "response": 24}, device="cpu", dtype=dtype)
    assert out["vllm_logprob_mismatch_bound"] == {"bfloat16": 0.1, "float32": 1e-3}[dtype]
    assert out["vllm_swap_back_same_tokens"] and out["vllm_reference_differs"]
    assert out["vllm_ok"] is ok and vllm.CALLS[0][1]["dtype"] == dtype


def test_vllm_ok_needs_the_token_signals_too(vllm, world, monkeypatch):
    """A swap back that does not reproduce the first tokens fails vllm_ok even with a mismatch of 0."""
    import bench.vllm_check as V
    monkeypatch.setattr(V, "_hf_mismatch", lambda model, ro: 0.0)
    real = vllm.LLM.generate
    n = {"calls": 0}

    def generate(self, prompts, params=None, **kw):      # the 4th generate (after the swap back) goes stale
        n["calls"] += 1
        if n["calls"] == 4:
            self.weights = "stale"
        return real(self, prompts, params, **kw)
    monkeypatch.setattr(vllm.LLM, "generate", generate)
    out = V.vllm_check(str(world / "base_model"), {"prompt": 8, "response": 24}, device="cpu")
    assert out["vllm_swap_back_same_tokens"] is False and out["vllm_ok"] is False


def test_gpu_check_part_is_skipped_without_vllm(monkeypatch):
    from bench.vllm_check import vllm_check
    monkeypatch.setitem(sys.modules, "vllm", None)          # import vllm -> ImportError
    assert vllm_check("/nonexistent", {}) == {"vllm": "skipped: vllm is not importable"}


def test_without_a_gpu_the_vllm_part_is_skipped_even_when_vllm_imports(vllm, monkeypatch, tmp_path):
    """bench.gpu_check._vllm on a CPU-only machine: no engine is built, the reason is recorded, and no
    pass/fail check ran (report["ok"] None)."""
    import torch

    from bench import gpu_check
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    part = gpu_check._vllm(tmp_path, Namespace(vllm_cpu=False, prompt=16, response=96))
    assert part["vllm"].startswith("skipped: no GPU") and "--vllm-cpu" in part["vllm"] and vllm.CALLS == []
    report = {"vllm": part}
    gpu_check.verdict(report)
    assert report["checks"] == {} and report["ok"] is None
    for ok in (True, False):
        report = {"vllm": {"vllm_ok": ok}}
        gpu_check.verdict(report)
        assert report["checks"] == {"vllm_ok": ok} and report["ok"] is ok


def test_gpu_check_on_a_cpu_machine_with_vllm_importable(tmp_path):
    """The whole command, CPU-only (CUDA_VISIBLE_DEVICES empty), with the fake vllm importable: exit 0, the
    vLLM part skipped with the reason; the only pass/fail check that ran is the trainer's save and resume."""
    args = ["gpu_check", "--out", str(tmp_path), "--tiny", "--device", "cpu", "--prompt", "8",
            "--response", "24", "--chunk", "16", "--steps", "1"]
    code = (f"import runpy, sys, vllm; assert vllm.__file__.startswith({str(FAKE)!r}); sys.argv = {args!r}; "
            "runpy.run_module('bench.gpu_check', run_name='__main__')")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(FAKE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rep["vllm"]["vllm"].startswith("skipped: no GPU") and rep["ok"] is True
    assert rep["checks"] == {"resume_exact": True} and "result: PASS (resume_exact)" in r.stdout

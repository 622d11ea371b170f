"""The vLLM part of the GPU check (bench.gpu_check's last phase): the colocated engine
(common.rollout.vllm_engine) on a random-weight HF model folder, with a pass signal, `vllm_ok`, against a
stated log-prob bound.

On a GPU it runs in bfloat16 (bound 0.1); its CPU form (`python -m bench.gpu_check --tiny --device cpu
--vllm-cpu`, vLLM's CPU build, tests/vllm_real) runs in float32 with enforce_eager (bound 1e-3). Bounds:
armor.health.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from armor.health import mismatch_bound
from common.rollout.base import Rollout, SamplingParams


def _config(model_dir: str) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text())


class _IdsTokenizer:
    """For a model folder without tokenizer files (the GPU check's): EOS from config.json, ids as text."""

    def __init__(self, model_dir: str):
        self.eos_token_id = _config(model_dir).get("eos_token_id")

    def batch_decode(self, ids, skip_special_tokens=True):
        return [" ".join(map(str, r)) for r in ids]


def vllm_check(model_dir: str, out: dict, *, device: str | None = None, dtype: str = "bfloat16",
               enforce_eager: bool = False, gpu_memory_utilization: float | None = 0.3) -> dict:
    """The vLLM part of the GPU check, on a random-weight HF model folder (config.json and weights; a
    tokenizer is used when there is one).

    Builds the colocated engine (dummy start), pushes the policy's weights, generates (greedy, then sampled),
    swaps to a reference (the same weights perturbed) and back, every generate waking and then sleeping the
    engine. `out` may give the sizes: "prompt" tokens (default 16), "response" tokens (default 128; the
    sampled run, 16 prompts x 2 samples; greedy runs take at most 64). Adds to `out` and returns it: vllm
    version, start-up seconds, generation tokens/s, each push's seconds, the push count (an unchanged version
    must not push), whether the swap back reproduced the first greedy tokens and the reference changed them,
    the mean |log p_vLLM - log p_HF| on sampled tokens (8 responses, 512 tokens each at most), its bound
    (armor.health.mismatch_bound for `dtype`) and `vllm_ok`: all four signals pass (a push that misses a
    layer fails the bound). Without vllm: out["vllm"] = "skipped: vllm is not importable". Errors propagate
    (the check failed). `device`: where the HF copies live (default cuda when there is one); `dtype`: the
    engine's and the HF copies' (float32 for vLLM's CPU build); `gpu_memory_utilization`: None for vLLM's
    default."""
    try:
        import vllm
    except ImportError:
        out["vllm"] = "skipped: vllm is not importable"
        return out
    from common.models import load_model, load_tokenizer
    from common.rollout.vllm_engine import VLLMEngine
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    has_tok = any((Path(model_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    tok = load_tokenizer(model_dir) if has_tok else _IdsTokenizer(model_dir)
    vocab = _config(model_dir)["vocab_size"]
    prompt_len, response_len = int(out.get("prompt", 16)), int(out.get("response", 128))
    policy = load_model(model_dir, dtype, device).eval()
    reference = load_model(model_dir, dtype, device).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    prompts = torch.randint(0, vocab, (16, prompt_len), generator=torch.Generator().manual_seed(0)).tolist()
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=min(64, response_len), seed=0)
    sampled = SamplingParams(n=2, temperature=1.0, max_new_tokens=response_len, seed=1)

    def timed(fn, *a):
        t0 = time.perf_counter()
        res = fn(*a)
        return res, time.perf_counter() - t0

    eng, start_s = timed(lambda: VLLMEngine(model_dir, tok, max_model_len=prompt_len + response_len,
                                            dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                                            enforce_eager=enforce_eager))
    push_s = [timed(eng.sync_weights, policy, ("policy", 0))[1]]
    first = eng.generate(prompts, greedy)
    ro, gen_s = timed(eng.generate, prompts, sampled)
    unchanged_pushed = eng.sync_weights(policy, ("policy", 0))
    push_s.append(timed(eng.sync_weights, reference, ("reference", 0))[1])
    ref = eng.generate(prompts, greedy)
    push_s.append(timed(eng.sync_weights, policy, ("policy", 0))[1])
    again = eng.generate(prompts, greedy)
    mismatch, bound = _hf_mismatch(policy, ro), mismatch_bound(None, dtype)
    same, differs = again.response_ids == first.response_ids, ref.response_ids != first.response_ids
    out.update(vllm=vllm.__version__, vllm_dtype=dtype, vllm_start_s=round(start_s, 2),
               vllm_generate_tokens_per_s=round(ro.num_tokens / gen_s, 1),
               vllm_generated_tokens=ro.num_tokens,
               vllm_push_s=[round(s, 3) for s in push_s], vllm_pushes=eng.pushes,
               vllm_unchanged_version_pushed=unchanged_pushed, vllm_swap_back_same_tokens=same,
               vllm_reference_differs=differs, vllm_logprob_mismatch=mismatch,
               vllm_logprob_mismatch_bound=bound,
               # NaN (no sampled tokens) fails the bound too
               vllm_ok=bool(same and differs and not unchanged_pushed and mismatch <= bound))
    return out


@torch.no_grad()
def _hf_mismatch(model, ro: Rollout, rows: int = 8, tokens: int = 512) -> float:
    """Mean |log p_engine - log p_HF| over the first `tokens` sampled tokens of the first `rows` responses
    (sampled at temperature 1, top_p 1, so processed and raw log-probs agree)."""
    diffs = []
    dev = next(model.parameters()).device
    for p, r, lp in list(zip(ro.prompt_ids, ro.response_ids, ro.logprobs))[:rows]:
        r, lp = r[:tokens], lp[:tokens]
        if r:
            ids = torch.tensor([p + r], device=dev)
            logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float()
            hf = torch.log_softmax(logits, -1).gather(-1, ids[0, len(p):, None])[:, 0]
            diffs.append((hf - torch.tensor(lp, device=dev)).abs())
    return float(f"{float(torch.cat(diffs).mean()):.4g}") if diffs else float("nan")

"""Rollout engines behind one interface; the engine is chosen by config (`rollout.engine`)."""
from common.rollout.base import Rollout, RolloutEngine, SamplingParams, prompt_seed


def build_engine(kind: str, model, tokenizer, *, model_path: str = "", **kw) -> RolloutEngine:
    """`hf` serves an in-process module (keywords max_batch, fast: a common.fast.FastPaths); `vllm` starts a
    vLLM engine from `model_path` (GPU; keywords of common.rollout.vllm_engine.VLLMEngine, max_model_len
    required)."""
    if kind == "hf":
        from common.rollout.hf import HFEngine
        return HFEngine(model, tokenizer,
                        **{k: v for k, v in kw.items() if k in ("max_batch", "fast")})
    if kind == "vllm":
        from common.rollout.vllm_engine import VLLMEngine
        return VLLMEngine(model_path, tokenizer, **{k: v for k, v in kw.items()
                                                    if k not in ("max_batch", "fast")})
    raise ValueError(f"rollout.engine: unknown engine {kind!r} (known: hf, vllm)")


__all__ = ["Rollout", "RolloutEngine", "SamplingParams", "build_engine", "prompt_seed"]

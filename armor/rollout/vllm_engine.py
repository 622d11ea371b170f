"""vLLM rollout engine (GPU only; vllm is an optional extra, imported lazily).

One LLM instance serves the policy and the reference: `sync_weights` streams a module's state dict into
the running engine (the paper's code swaps the reference weights in for the anchor samples). Not
exercised by the CPU test-suite; see docs/gpu.md for the GPU check.
"""
from __future__ import annotations

import torch

from armor.rollout.base import Rollout, RolloutEngine, SamplingParams


class VLLMEngine(RolloutEngine):
    def __init__(self, model_path: str, tokenizer, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.6,
                 tensor_parallel_size: int = 1, max_model_len: int | None = None, seed: int = 0):
        try:
            from vllm import LLM
        except ImportError as e:  # pragma: no cover - GPU machines only
            raise ImportError("rollout.engine=vllm needs the `gpu` extra: pip install 'armor-repro[gpu]'") from e
        self.tokenizer = tokenizer
        self.llm = LLM(model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len, seed=seed,
                       enable_sleep_mode=False)

    def sync_weights(self, model: torch.nn.Module) -> None:  # pragma: no cover - GPU machines only
        state = model.state_dict()

        def _load(worker):  # runs inside each vLLM worker
            worker.model_runner.model.load_weights(weights=list(state.items()))

        self.llm.collective_rpc(_load)
        self.llm.reset_prefix_cache()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout:  # pragma: no cover
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        sp = VSP(n=params.n, temperature=params.temperature, top_p=params.top_p,
                 max_tokens=params.max_new_tokens, seed=params.seed, logprobs=0)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        ro = Rollout()
        for i, o in enumerate(outs):
            for c in o.outputs:
                ro.prompt_index.append(i)
                ro.prompt_ids.append(list(prompts[i]))
                ro.response_ids.append(list(c.token_ids))
                ro.logprobs.append([next(iter(d.values())).logprob for d in (c.logprobs or [])])
                ro.finished.append(c.finish_reason == "stop")
                ro.texts.append(c.text)
        return ro

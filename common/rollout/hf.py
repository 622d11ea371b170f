"""Transformers rollout engine: a batched KV-cache sampling loop over any causal LM (CPU or GPU).

Prompts are left-padded (position ids from the attention mask), sampling is temperature + nucleus
(top_p), each row stops at EOS, and a torch.Generator seeded from `SamplingParams.seed` makes the
sample reproducible. Faster than `model.generate` for tiny models because it skips its per-step
processing stack, and it returns the per-token sampling log-probs the trainer logs.

The loop asks a *stepper* for next-token logits: `HFStepper` (the model's own forward with a DynamicCache,
any causal LM), or, where the run's `compute.fast` chose it (`fast`, common/fast/__init__.py), the static-KV
decoder common.fast.static_kv_decode.StaticStepper for the layouts it knows.
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from common.fast import KEY, OFF, FastPaths
from common.fast.static_kv_decode import StaticStepper, kernel_problem
from common.rollout.base import Rollout, RolloutEngine, SamplingParams
from common.yaml_config import ConfigError

# A CPU decode step whose activations are smaller than this (rows x hidden size) runs on one thread: its
# operations are so small that waking the other OpenMP threads costs more than they save (the suite sets
# OMP_WAIT_POLICY=PASSIVE). The threshold is the tiny world's model at 128 rows; `python -m bench.step_time`
# (2 threads) measures what it does to a training step (README, "Step-time benchmark").
SINGLE_THREAD_DECODE_BELOW = 128 * 64
# Rows the static decoder samples together on the CPU (HFEngine's default max_batch there; 256 elsewhere): at
# 256 rows a decode step's attention reads a KV cache no longer cache-resident, while HF's forward is faster
# in larger chunks (measured with bench.decode: records/fast_paths.md).
CPU_MAX_BATCH = 128


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (to -inf) the tokens outside the smallest set whose probability mass reaches top_p.

    logits: [N, V] -> [N, V]. The most likely token is always kept."""
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = torch.sort(logits, dim=-1, descending=True)
    cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    remove = cum - torch.softmax(sorted_logits, dim=-1) >= top_p   # mass before this token already >= p
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


def decode_texts(tokenizer, ids: list[list[int]]) -> list[str]:
    """tokenizer.batch_decode(ids, skip_special_tokens=True), through the fast tokenizer's own batch decode
    where that is all batch_decode does (no clean-up of tokenization spaces): batch_decode's per-token Python
    checks cost more than decoding a tiny world's responses."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return tokenizer.batch_decode(ids, skip_special_tokens=True)
    return backend.decode_batch(ids, skip_special_tokens=True)


_CACHE_ARGS = ("cache", "past_key_values")   # transformers >= 5.24 names forward's KV cache `cache`


def cache_arg(model) -> str:
    """The keyword `model.forward` takes its KV cache by. A wrong one is swallowed by forward's **kwargs (the
    call then silently runs without a cache), so it is read from the signature: of the model, else of a
    wrapped model (PEFT, torch.compile, DDP), else of this transformers' generation code."""
    from transformers.generation.utils import GenerationMixin

    m = model
    for _ in range(4):
        params = inspect.signature(m.forward).parameters
        for name in _CACHE_ARGS:
            if name in params:
                return name
        inner = getattr(m, "_orig_mod", None)
        inner = getattr(m, "module", None) if inner is None else inner
        if inner is None and hasattr(m, "get_base_model"):
            inner = m.get_base_model()
        if not isinstance(inner, torch.nn.Module) or inner is m:
            break
        m = inner
    params = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "cache" if "cache" in params else "past_key_values"


def check_cache_filled(cache: DynamicCache, n_tokens: int) -> None:
    """Raise if a prefill of n_tokens left `cache` empty (forward ignored it: decoding would be wrong)."""
    if n_tokens and cache.get_seq_length() == 0:
        raise RuntimeError("the model's forward did not fill the KV cache passed to it (cache keyword "
                           f"{_CACHE_ARGS}?): decoding without it would sample from wrong logits")


class HFStepper:
    """Next-token logits from the model's own forward pass and a DynamicCache (works for any causal LM)."""

    def __init__(self, model):
        self.model = model
        self.cache = DynamicCache()
        self.cache_kw = {cache_arg(model): self.cache}

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                max_new_tokens: int) -> torch.Tensor:
        """ids, mask, pos: [N, P] (left-padded) -> logits of the next token [N, V]."""
        self.mask = torch.cat([mask, torch.ones(mask.shape[0], max_new_tokens, dtype=mask.dtype,
                                                device=mask.device)], dim=1)
        self.plen = ids.shape[1]
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                            **self.cache_kw).logits[:, -1, :]
        check_cache_filled(self.cache, self.plen)
        return logits

    def decode(self, tok: torch.Tensor, pos: torch.Tensor, t: int) -> torch.Tensor:
        """tok, pos: [N] (the t-th new token of each row, t >= 0) -> logits of the token after it [N, V]."""
        return self.model(input_ids=tok[:, None], attention_mask=self.mask[:, :self.plen + t + 1],
                          position_ids=pos[:, None], use_cache=True, **self.cache_kw).logits[:, -1, :]

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in `rows` ([K] ascending indices into the current rows) from the cache and
        mask."""
        self.expand(rows)

    def expand(self, rows: torch.Tensor) -> None:
        """Row j of the cache and the mask becomes current row rows[j] ([K] indices, repeats allowed)."""
        self.cache.reorder_cache(rows)
        self.mask = self.mask[rows]


def _static(fast: FastPaths, model) -> bool:
    """Whether `fast` decodes `model` with the static-KV decoder (its layout permitting)."""
    return fast.static_decode and StaticStepper.supports(model)


def make_stepper(model, fast: FastPaths = OFF, workspace: dict | None = None):
    """The stepper `fast` chooses for `model`: the static-KV decoder where chosen and the layout allows (its
    kernel with `fast.decode_kernel`), else HFStepper; `workspace`: the static stepper's reusable cache
    storage (a dict the caller keeps between calls)."""
    if _static(fast, model):
        return StaticStepper(model, workspace, kernel=fast.decode_kernel)
    return HFStepper(model)


class HFEngine(RolloutEngine):
    def __init__(self, model: torch.nn.Module, tokenizer, max_batch: int | None = None,
                 fast: FastPaths = OFF):
        """fast: the run's fast paths (common.fast.choose; OFF: HF's forward for every step). With the decode
        kernel, a model it cannot decode is a ConfigError naming compute.fast."""
        self.model = model
        self.fast = fast
        why = kernel_problem(model) if fast.decode_kernel else None
        if why is not None:
            raise ConfigError(f"{KEY}: 'native' cannot run: the decode kernel cannot decode the model: {why}")
        self.tokenizer = tokenizer
        self.max_batch = max_batch         # rows sampled together (None: `batch_rows`)
        self._workspace: dict = {}         # the static decoder's KV-cache storage, kept between calls
        eos = tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            self.eos_ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.pad_id = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                       else next(iter(self.eos_ids)))

    def batch_rows(self) -> int:
        """Rows sampled together: max_batch, or by default CPU_MAX_BATCH for the static decoder on the CPU and
        256 otherwise."""
        if self.max_batch is not None:
            return self.max_batch
        cpu = next(self.model.parameters()).device.type == "cpu"
        return CPU_MAX_BATCH if cpu and _static(self.fast, self.model) else 256

    def _push(self, model: torch.nn.Module) -> None:
        self.model = model   # same process, same device: serving a module is pointing at it

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        gen = None
        if params.seed is not None:
            gen = torch.Generator(device="cpu").manual_seed(params.seed)
        flat = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        out = Rollout()
        rows = self.batch_rows()
        for start in range(0, len(flat), rows):
            chunk = flat[start:start + rows]
            resp, lps, fin = self._sample([i for i, _ in chunk], prompts, params, gen)
            for (i, p), r, lp, f in zip(chunk, resp, lps, fin):
                out.prompt_index.append(i)
                out.prompt_ids.append(list(p))
                out.response_ids.append(r)
                out.logprobs.append(lp)
                out.finished.append(f)
        out.texts = decode_texts(self.tokenizer, out.response_ids)
        return out

    def _sample(self, row_prompt: list[int], prompts: list[list[int]], params: SamplingParams, gen):
        """Sample one response per row; row j continues prompts[row_prompt[j]] (the rows of one prompt are
        adjacent). Each prompt is prefilled once and its KV cache copied to its rows."""
        model, device = self.model, next(self.model.parameters()).device
        was_training, threads = model.training, torch.get_num_threads()
        # the static decoder reads no module's training flag: no switch (HF's train() re-kernelizes, ~0.3 ms)
        switch = was_training and not _static(self.fast, model)
        if switch:
            model.eval()
        try:
            return self._sample_rows(row_prompt, prompts, params, gen, device)
        finally:
            torch.set_num_threads(threads)
            if switch:
                model.train()

    def _fit_threads(self, rows: int, device) -> None:
        """One CPU thread for decode steps too small to share (SINGLE_THREAD_DECODE_BELOW);
        the caller restores."""
        hidden = getattr(getattr(self.model, "config", None), "hidden_size", None)
        if device.type == "cpu" and hidden and rows * hidden < SINGLE_THREAD_DECODE_BELOW:
            torch.set_num_threads(1)

    def _sample_rows(self, row_prompt: list[int], prompts: list[list[int]], params: SamplingParams,
                     gen, device):
        uniq = sorted(set(row_prompt))
        row_of = {i: u for u, i in enumerate(uniq)}
        n, plen, T = len(row_prompt), max(len(prompts[i]) for i in uniq), params.max_new_tokens
        ids = torch.full((len(uniq), plen), self.pad_id, dtype=torch.long)
        mask = torch.ones((len(uniq), plen), dtype=torch.long)
        for u, i in enumerate(uniq):
            p = prompts[i]
            ids[u, plen - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[u, :plen - len(p)] = 0
        ids, mask = ids.to(device), mask.to(device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        stepper = make_stepper(self.model, self.fast, self._workspace)
        logits = stepper.prefill(ids, mask, pos, T)
        self._fit_threads(n, device)
        expand = torch.tensor([row_of[i] for i in row_prompt], device=device)
        if len(uniq) < n:                       # one copy of the prompt's cache per response
            stepper.expand(expand)
            logits = logits[expand]
        next_pos = pos[expand, -1] + 1
        eos = torch.tensor(sorted(self.eos_ids), device=device)
        noise = _GumbelSteps(gen, n, logits.shape[-1], T)
        # per step: the rows still sampling (indices into the n rows; `logits` holds exactly these rows),
        # their tokens and sampling log-probs; laid out [n, T] once at the end
        active = torch.arange(n, device=device)
        rows_of, toks_of, lps_of = [], [], []
        steps = 0
        for t in range(T):
            logits = logits.float()
            if params.temperature == 0:
                tok = logits.argmax(-1)
                lp = torch.log_softmax(logits, -1).gather(-1, tok[:, None])[:, 0]
            else:
                scaled = logits if params.temperature == 1.0 else logits / params.temperature
                logp_all = torch.log_softmax(top_p_filter(scaled, params.top_p), -1)
                # Gumbel-max sampling with one draw per (row, vocab entry) for ALL n rows, finished ones too:
                # the same random stream as sampling the full batch, so dropping finished rows changes no
                # sample
                g = noise.step(t).to(device)
                tok = (logp_all + (g if len(active) == n else g[active])).argmax(-1)
                lp = logp_all.gather(-1, tok[:, None])[:, 0]
            rows_of.append(active)
            toks_of.append(tok)
            lps_of.append(lp)
            steps = t + 1
            running = (tok != eos[0]) if len(eos) == 1 else ~torch.isin(tok, eos)
            if t == T - 1:
                break
            if not bool(running.all()):         # drop the rows that just finished (batch and KV cache)
                keep = running.nonzero()[:, 0]
                if len(keep) == 0:
                    break
                active, tok, next_pos = active[keep], tok[keep], next_pos[keep]
                stepper.keep(keep)
                self._fit_threads(len(keep), device)
            logits = stepper.decode(tok, next_pos, t)
            next_pos = next_pos + 1
        noise.finish(steps)
        at = torch.cat([r * T + t for t, r in enumerate(rows_of)])       # [n, T] flat place of each sample
        tokens = torch.full((n * T,), self.pad_id, dtype=torch.long, device=device).index_copy_(
            0, at, torch.cat(toks_of)).view(n, T)
        logps = torch.zeros(n * T, device=device).index_copy_(0, at, torch.cat(lps_of).float()).view(n, T)
        # each row up to and including its first EOS (a row without one sampled every step)
        is_eos = torch.isin(tokens[:, :steps], eos)
        stopped = is_eos.any(1)
        lens = torch.where(stopped, is_eos.int().argmax(1) + 1, steps).tolist()
        toks, lpl = tokens[:, :steps].tolist(), logps[:, :steps].tolist()
        return ([r[:k] for r, k in zip(toks, lens)], [lp[:k] for lp, k in zip(lpl, lens)], stopped.tolist())


# the Gumbel noise of up to this many (step, row, vocab entry) triples is drawn at once
NOISE_BLOCK = 1 << 22


class _GumbelSteps:
    """Each decode step's Gumbel noise [n, vocab] (`_gumbel`), drawn from `gen` for several steps at once: one
    [k, n, vocab] draw is the same stream as k draws of [n, vocab]. `finish(steps)` leaves `gen` where `steps`
    one-step draws would have (a later chunk of the same generate call continues from there)."""

    def __init__(self, gen, n: int, vocab: int, max_steps: int):
        self.gen, self.n, self.vocab = gen, n, vocab
        # without a generator (the global one) each step draws its own: nothing to rewind
        self.k = 1 if gen is None else max(1, min(max_steps, NOISE_BLOCK // max(1, n * vocab)))
        self.block, self.start, self.state = None, 0, None

    def step(self, t: int) -> torch.Tensor:
        if self.block is None or t >= self.start + len(self.block):
            self.state = None if self.gen is None else self.gen.get_state()
            self.block, self.start = _gumbel(self.gen, (self.k, self.n, self.vocab)), t
        return self.block[t - self.start]

    def finish(self, steps: int) -> None:
        used = steps - self.start
        if self.block is not None and self.state is not None and used < len(self.block):
            self.gen.set_state(self.state)
            torch.rand((used, self.n, self.vocab), generator=self.gen)


def _gumbel(gen, shape: tuple) -> torch.Tensor:
    """Gumbel noise -log(-log u) of `shape` from as many uniforms u drawn from `gen` (on the CPU)."""
    return torch.rand(shape, generator=gen).clamp_min_(1e-20).log_().neg_().log_().neg_()

"""ARMOR's Algorithm 1 in general form; every arm of the paper is a configuration of these parts.

One RL step:
  1. repeat until B prompts are kept (at most rollout.max_rounds rounds):
       draw prompts -> |G| (|G|-1 with anchors) on-policy samples from θ -> grade
       [anchors] ref_n samples from θref for the prompts that pass the on-policy filter -> grade
       keep rule: DAPO dynamic sampling, or ARMOR's anchor rule (on-policy rewards not all equal AND a
       correct reference sample; the first correct one is the anchor)
  2. rewards (+1/-1, overlong shaping) -> group advantages (GRPO / QAE); OPD/MOPD token signals
  3. log-probs of every response under θold (the first mini-batch's from its own update forward pass, since
     θold = θ until the first optimizer step), θref (when the loss or the KL monitor reads it) and the teacher
  4. μ mini-batch updates of the configured objective (plain / mixed / static-clip / off-policy ratio,
     clip-higher + dual-clip, optional β·KL), AdamW with warm-up and gradient clipping
  5. every τ steps (until a given step): θref <- θ
  6. metrics row (also to TensorBoard / W&B: armor.logging_backends); validation every k steps; checkpoint
     every k steps (atomic, resumable)
The mathematics lives in armor.objectives / advantages / anchors / rewards; this file orchestrates. It is
~800 lines on purpose: Algorithm 1's orchestration in one class (collect, update, reset, validate, save and the
loop, in that order) reads top to bottom; the step's typed state (armor.step_state), the run folder
(armor.run_folder), the checkpoint format, the FSDP2 plumbing (armor.parallel, armor.spmd, armor.microbatch) and
the engines (common.rollout) each live in their own module.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from armor import checkpoint as ckpt
from armor import microbatch
from armor import parallel
from armor import faults
from armor import logging_backends
from armor import run_folder
from armor.advantages import group_advantages
from armor.anchors import anchor_keep, assemble_anchor_groups, dynamic_sampling_keep
from armor.config import RunConfig
from armor.data import PromptStream, load_prompts
from armor.objectives import (ADDITIVE_METRICS, RATIOS, kl_forward_estimate, kl_reverse_estimate,
                              logprob_mismatch, masked_mean, mopd_token_advantages, opd_token_advantages,
                              pad_token_values, policy_loss)
from armor.policy import forward_logprobs, make_token_batch
from armor.rewards import shaped_reward
from armor.spmd import global_masked_mean, shard_seed, sharded_map
from armor.step_state import (FrozenLogprobs, Group, MinibatchPlan, PhaseTimes, RolloutStats, SeedPhase, UpdateBatch,
                               engine_logprobs, step_seed)
from common.benchmarks import load_benchmark, register_jsonl
from common.distributed import Dist
from common.grading import Grader
from common.jsonl import append_jsonl, write_json_atomic
from common.metrics import avg_at_k
from common.models import DTYPES, build_on_meta, check_model_path, load_model, load_skeleton, load_tokenizer
from common.rollout import SamplingParams, build_engine
from common.sampling import encode_prompt, sample_and_grade

# the metric keys that must agree between an interrupted-and-resumed run and an uninterrupted one
DETERMINISTIC_KEYS = ("reward_mean", "accuracy", "response_length", "entropy", "clipfrac", "kl_reverse",
                      "kl_forward", "prompts_drawn", "prompts_kept", "anchors", "lr", "grad_norm", "loss")
# lazy anchors ask the reference about ceil(ANCHOR_CHUNK_MARGIN x still-needed) passing prompts at a time: a few
# more than needed, since a prompt whose ref_n samples are all wrong is not kept (a cost knob, not a paper number)
ANCHOR_CHUNK_MARGIN = 1.5


class Trainer:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        a = cfg.algo
        # ---- everything that can be wrong with the inputs is checked before any work is spent
        faults.check_env()
        logging_backends.check(cfg.logging)
        check_model_path(cfg.model.path, "model.path")
        self.ref_path = a.reference.path or cfg.model.path
        check_model_path(self.ref_path, "algo.reference.path")
        if a.distill.mode != "none" and a.distill.teacher_path:
            check_model_path(a.distill.teacher_path, "algo.distill.teacher_path")
        self.prompts = load_prompts(cfg.data.train, cfg.data.problem_field, cfg.data.answer_field)
        if cfg.data.max_prompts:
            self.prompts = self.prompts[:cfg.data.max_prompts]
        self.val_sets = self._load_validation_sets()

        if cfg.threads or os.environ.get("ARMOR_THREADS"):
            torch.set_num_threads(cfg.threads or int(os.environ["ARMOR_THREADS"]))
        self.dist = Dist.from_env(cfg.device, timeout_s=cfg.parallel.timeout_s)   # world size 1 without torchrun
        self.device = self.dist.device
        self.shards = cfg.rollout.shards or self.dist.world_size
        if self.dist.distributed and cfg.model.dtype != "float32":
            raise ValueError(f"model.dtype: {cfg.model.dtype!r}: with several ranks the policy's sharded parameters "
                             "are its master weights and must be float32; parallel.compute_dtype: bfloat16 "
                             "computes in bf16")
        per_mini = cfg.batch.mini_batch_prompts * cfg.batch.group_size
        if per_mini % self.dist.world_size:
            raise ValueError(f"batch.mini_batch_prompts: {cfg.batch.mini_batch_prompts} prompts x batch.group_size "
                             f"{cfg.batch.group_size} = {per_mini} responses per mini-batch, not divisible by the "
                             f"world size {self.dist.world_size}")
        if self.shards % self.dist.world_size:
            raise ValueError(f"rollout.shards: {self.shards} is not a multiple of the world size "
                             f"{self.dist.world_size}")
        self.tokenizer = load_tokenizer(cfg.model.path)
        self.pad_id = self.tokenizer.pad_token_id
        self.stream = PromptStream(self.prompts, cfg.seed, cfg.data.shuffle)
        self.step = 0
        self.reference_step: int | None = None   # the step whose policy weights πref holds (None: ref_path)
        self.best_val: tuple[float, int] | None = None
        self._prompt_cache: dict[int, list[int]] = {}
        self._started = False

    def start(self) -> "Trainer":
        """Open the run: rank 0 prepares the run folder (config.yaml, the resume point, torn JSONL lines, damaged
        checkpoints), then every rank loads the models, shards them, builds the engine and the grader's workers
        and restores the resume point's state. The constructor only checks and reads inputs; `fit` calls this,
        and so may a caller that wants to drive steps itself. Idempotent; returns the trainer."""
        if self._started:
            return self
        self._started = True
        cfg, a = self.cfg, self.cfg.algo
        torch.manual_seed(cfg.seed)
        self.grader = Grader(num_workers=cfg.reward.grader_workers, timeout_s=cfg.reward.grader_timeout_s,
                             mode=cfg.reward.answer_mode)

        # rank 0 prepares the run folder (config, resume point, torn lines, damaged checkpoints); all follow it
        resume_from = self.dist.all_gather_object(self._prepare_run_dir() if self.dist.is_main else None)[0]
        init_path = str(ckpt.step_dir(self.run_dir, resume_from)) if resume_from is not None else cfg.model.path
        # trainer_state.pt (the whole optimizer state of a one-rank run) is read once for the resume
        state = ckpt.load_state(self.run_dir, resume_from) if resume_from is not None else None
        ref_path = self._reference_path(resume_from, state)
        teacher_path = a.distill.teacher_path if a.distill.mode != "none" else ""
        # several ranks: FSDP2-sharded fp32 masters (policy) and frozen shards (πref, teacher), built on the meta
        # device and filled from the one full copy rank 0 reads. The HF engine samples from a plain replica that
        # holds whichever full weights it was last given (versioned); vLLM holds its own copy and gathers the
        # shards itself. Checkpoints are exported through a weightless skeleton of the architecture.
        self.replica = self.skeleton = None
        self._served: tuple | None = None        # the weights the replica holds: ("policy", v) | ("reference", v)
        self._versions = {"policy": 0, "reference": 0}
        if not self.dist.distributed:
            self.policy = self._load(init_path)
            self.reference = self._load(ref_path).requires_grad_(False)
            self.teacher = self._load(teacher_path).requires_grad_(False) if teacher_path else None
        else:
            pol_src, ref_src = self._sharded_sources(resume_from, state)
            self.policy = self._load_sharded(init_path, sharded=pol_src)
            self.reference = self._load_sharded(ref_path, frozen=True, sharded=ref_src)
            self.teacher = self._load_sharded(teacher_path, frozen=True) if teacher_path else None
            if cfg.rollout.engine == "hf":
                self.replica = self._load(init_path).eval().requires_grad_(False)
            self.skeleton = load_skeleton(init_path, cfg.model.trust_remote_code)
        self.policy.train()
        self.reference.eval()
        if a.distill.mode != "none":
            self.teacher = self.teacher.eval() if self.teacher is not None else self.reference
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps,
                                           weight_decay=o.weight_decay)
        warm = o.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
        self.engine = build_engine(cfg.rollout.engine, self.replica or self.policy, self.tokenizer,
                                   model_path=init_path,
                                   dtype=cfg.parallel.compute_dtype if self.dist.distributed else cfg.model.dtype,
                                   gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
                                   tensor_parallel_size=cfg.rollout.tensor_parallel_size, seed=cfg.seed,
                                   static_cache=cfg.rollout.static_kv_cache,
                                   max_model_len=cfg.lengths.max_prompt + cfg.lengths.max_response)
        if resume_from is not None:
            self._restore(resume_from, state)
        return self

    # ------------------------------------------------------------------------------------------ setup
    def _load(self, path: str):
        m = self.cfg.model
        return load_model(path, m.dtype, self.device, m.gradient_checkpointing, m.trust_remote_code)

    def _load_sharded(self, path: str, frozen: bool = False, sharded: tuple[Path, str] | None = None):
        """An FSDP2-sharded model (armor.parallel), built on the meta device on every rank and sharded, then
        filled either from a checkpoint's sharded state (`sharded` = (step folder, "model" | "reference"): each
        rank reads its own shards) or from the full copy of `path` that rank 0 alone reads into CPU memory. The
        policy's shards keep model.dtype (float32: the master weights); a frozen reference or teacher is stored in
        the compute dtype, which FSDP2 would gather it in anyway."""
        m, pc = self.cfg.model, self.cfg.parallel
        dtype = pc.compute_dtype if frozen else m.dtype
        model = build_on_meta(path, dtype, m.gradient_checkpointing and not frozen, m.trust_remote_code)
        parallel.shard_model(model, DTYPES[pc.compute_dtype], offload=pc.cpu_offload, frozen=frozen)
        device = "cpu" if pc.cpu_offload else self.device
        if sharded is not None:
            model.to_empty(device=device)
            ckpt.load_sharded_weights(sharded[0], model, sharded[1])
        else:
            full = (load_model(path, dtype, "cpu", trust_remote_code=m.trust_remote_code) if self.dist.is_main
                    else None)
            parallel.load_from_rank0(model, full, device)
            del full
        return model

    def _sharded_sources(self, resume_from: int | None, state: dict | None) -> tuple:
        """Where a resume of several ranks reads the policy and πref as shards: (step folder, entry) each, or None
        to read the HF folder on rank 0 (a fresh start, a one-rank checkpoint, πref never reset)."""
        if resume_from is None:
            return None, None
        d = ckpt.step_dir(self.run_dir, resume_from)
        keys = ckpt.sharded_keys(d)
        if "model" not in keys:
            return None, None
        reference_step = state["reference_step"]
        if reference_step == resume_from:            # πref was reset to this very step's policy
            return (d, "model"), (d, "model")
        return (d, "model"), ((d, "reference") if reference_step is not None and "reference" in keys else None)

    def _load_validation_sets(self) -> dict:
        sets = {}
        if not self.cfg.validation.benchmarks:
            return sets
        for spec in self.cfg.validation.benchmarks:
            name, _, path = spec.partition("=")
            if path:
                if not Path(path).is_file():
                    raise FileNotFoundError(f"validation.benchmarks: {spec!r}: file {path!r} does not exist")
                register_jsonl(name, path)
            sets[name] = load_benchmark(name, limit=self.cfg.validation.max_problems)
        return sets

    def _prepare_run_dir(self) -> int | None:
        """Create the run folder, or find the checkpoint to resume from (None = fresh start): armor.run_folder."""
        return run_folder.prepare(self.run_dir, self.cfg)

    def _restore(self, step: int, state: dict) -> None:
        if state["optimizer"] is None:        # written by several ranks: the optimizer's shards
            ckpt.load_sharded_optimizer(ckpt.step_dir(self.run_dir, step), self.policy, self.optimizer)
        else:
            ckpt.load_optimizer_state(self.policy, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.stream.load_state_dict(state["data"])
        self.step = state["step"]
        self.reference_step = state["reference_step"]
        self.best_val = state.get("best_val")
        if state.get("shards", 1) != self.shards:
            warnings.warn(f"{self.run_dir}: the run sampled in {state.get('shards', 1)} rollout shard(s) and now "
                          f"samples in {self.shards} (rollout.shards, default the world size): from here on its "
                          "samples differ from an uninterrupted run's; set rollout.shards to keep them",
                          stacklevel=2)
        same_world = state.get("world_size", 1) == self.dist.world_size
        own = ckpt.rank_rng_state(ckpt.step_dir(self.run_dir, step), self.dist.rank) if same_world else None
        ckpt.set_rng_state(own or state["rng"])

    def _reference_path(self, resume_from: int | None, state: dict | None) -> str:
        """Where πref's weights are read: algo.reference.path (or the model), or, resuming a run whose πref was
        reset, the checkpoint (its own weights if the reset was at that step, else its reference/ folder)."""
        if resume_from is None:
            return self.ref_path
        reference_step = state["reference_step"]
        if reference_step is None:
            return self.ref_path
        d = ckpt.step_dir(self.run_dir, resume_from)
        return str(d if reference_step == resume_from else d / "reference")

    def prompt_ids(self, p) -> list[int]:
        if p.index not in self._prompt_cache:
            ids = encode_prompt(self.tokenizer, p.problem, self.cfg.data.prompt_template)
            self._prompt_cache[p.index] = ids[-self.cfg.lengths.max_prompt:]
        return self._prompt_cache[p.index]

    # --------------------------------------------------------------------------------------- rollout
    def _serve(self, model) -> bool:
        """Have the engine serve `model`'s current weights, versioned ("policy", optimizer steps) or ("reference",
        resets): a version the engine holds already costs nothing, so this runs before every generate call and a
        round with anchors swaps policy -> reference -> policy at most once. One rank: the engine is given the
        module. Several: a push is a collective (every rank calls this before sampling its shards); an engine
        that gathers shards itself (vLLM) streams the sharded model's full tensors, the HF engine samples from
        the replica, given the full weights. Returns whether weights moved."""
        which = "reference" if model is self.reference else "policy"
        version = (which, self._versions[which])
        if not self.dist.distributed:
            return self.engine.sync_weights(model, version)
        if self.replica is None:                # the engine gathers the shards itself (vLLM)
            if self.engine.version == version:
                return False
            parallel.reshard(model)             # its state dict must hold the shards (DTensors), not gathered weights
            return self.engine.sync_weights(model, version)
        if self._served != version:
            self.replica.load_state_dict(parallel.full_state_dict(model))
            parallel.reshard(model)
            self._served = version
        return self.engine.sync_weights(self.replica, version)

    def _generate(self, model, prompt_ids, n, seed, tm: PhaseTimes):
        r = self.cfg.rollout
        t0 = time.perf_counter()
        self._serve(model)
        ro = self.engine.generate(prompt_ids, SamplingParams(n=n, temperature=r.temperature, top_p=r.top_p,
                                                             max_new_tokens=self.cfg.lengths.max_response,
                                                             seed=seed))
        tm.generate += time.perf_counter() - t0
        tm.tokens += ro.num_tokens
        return ro

    def _grade(self, texts, golds, tm: PhaseTimes) -> list[bool]:
        t0 = time.perf_counter()
        verdicts = self.grader.grade(texts, golds, "math")
        tm.score += time.perf_counter() - t0
        return [bool(v.correct) for v in verdicts]

    def _sample_round(self, model, pids, golds, n, seed, tm: PhaseTimes) -> tuple[list[list[int]], list[bool], list]:
        """n responses to each prompt, their verdicts and the engine's log-probs of their tokens, prompt-major: one
        generate call seeded `seed`, or (several shards) each shard seeded on its own and gathered on every rank
        (armor.spmd)."""
        if self.shards == 1:
            ro = self._generate(model, pids, n, seed, tm)
            return (ro.response_ids, self._grade(ro.texts, [golds[i] for i in ro.prompt_index], tm),
                    engine_logprobs(ro))
        t0 = time.perf_counter()
        self._serve(model)          # a collective on several ranks: every rank, whatever shards it draws
        tm.generate += time.perf_counter() - t0
        def work(idx, s):
            ro = self._generate(model, [pids[i] for i in idx], n, shard_seed(seed, s), tm)
            return (ro.response_ids, self._grade(ro.texts, [golds[idx[j]] for j in ro.prompt_index], tm),
                    engine_logprobs(ro))
        parts = [p for p in sharded_map(self.dist, self.shards, len(pids), work) if p is not None]
        return ([x for part in parts for x in part[0]], [x for part in parts for x in part[1]],
                [x for part in parts for x in part[2]])

    def collect(self, tm: PhaseTimes, stats: RolloutStats) -> list[Group]:
        """Step 1 of Algorithm 1: sample, score and keep until B prompts are kept.

        The kept prompts are the first B, in stream order, that pass the keep rule. Two economies never change
        which prompts those are: with `rollout.refill_margin` a round after the first draws only about as
        many prompts as the keep rate says are still needed, and with lazy anchors the reference samples only
        the passing prompts, in order, in chunks of about as many as may still be kept."""
        cfg, a = self.cfg, self.cfg.algo
        B, G = cfg.batch.prompts_per_step, cfg.batch.group_size
        n_on = G - 1 if a.anchor.enabled else G
        full = cfg.rollout.gen_batch_prompts or B
        kept: list[Group] = []
        for rnd in range(cfg.rollout.max_rounds):
            if len(kept) >= B:
                break
            prompts = self.stream.take(self._draw_size(B - len(kept), full, len(kept), stats.prompts_drawn))
            stats.prompts_drawn += len(prompts)
            stats.rounds += 1
            pids = [self.prompt_ids(p) for p in prompts]
            seed = step_seed(cfg.seed, self.step, SeedPhase.ON_POLICY, rnd)
            responses, correct, logprobs = self._sample_round(self.policy, pids, [p.answer for p in prompts], n_on,
                                                              seed, tm)
            faults.point("sample", self.step + 1)
            stats.correct += correct
            stats.lengths += [len(r) for r in responses]
            on_correct = torch.tensor(correct, dtype=torch.float32).view(len(prompts), n_on)
            resp = [responses[i * n_on:(i + 1) * n_on] for i in range(len(prompts))]
            anchor_of = [None] * len(prompts)
            if a.distill.mode == "opd":
                keep = torch.ones(len(prompts), dtype=torch.bool)
            elif a.anchor.enabled:
                keep, anchor_of = self._anchor_rollout(prompts, pids, on_correct, B - len(kept), rnd, tm, stats)
            elif a.dynamic_sampling:
                keep = dynamic_sampling_keep(on_correct)
            else:
                keep = torch.ones(len(prompts), dtype=torch.bool)
            for i in range(len(prompts)):
                if keep[i] and len(kept) < B:
                    c = [bool(x) for x in on_correct[i].tolist()]
                    g = Group(pids[i], prompts[i].answer, list(resp[i]), c, [False] * n_on,
                              logprobs[i * n_on:(i + 1) * n_on])
                    if anchor_of[i] is not None:
                        anchor, anchor_logprobs = anchor_of[i]
                        g.responses.append(anchor)
                        g.correct.append(True)
                        g.is_anchor.append(True)
                        g.engine_logprobs.append(anchor_logprobs)
                    kept.append(g)
        if len(kept) < B:
            msg = (f"step {self.step}: kept {len(kept)} of {B} prompts after rollout.max_rounds="
                   f"{cfg.rollout.max_rounds} rounds ({stats.prompts_drawn} drawn)")
            if cfg.rollout.on_shortfall == "error":
                raise RuntimeError(msg + "; raise rollout.max_rounds or set rollout.on_shortfall=proceed")
            stats.shortfall = B - len(kept)
        return kept

    def _draw_size(self, need: int, full: int, kept: int, drawn: int) -> int:
        """Prompts to draw this round: `full`, or after the first round with `rollout.refill_margin` m,
        ceil(m · need / (kept / drawn)) capped at `full` (full again while nothing has been kept)."""
        m = self.cfg.rollout.refill_margin
        if m is None or drawn == 0 or kept == 0:
            return full
        return max(1, min(full, math.ceil(m * need * drawn / kept)))

    def _anchor_rollout(self, prompts, pids, on_correct: torch.Tensor, need: int, rnd: int, tm: PhaseTimes,
                        stats: RolloutStats) -> tuple[torch.Tensor, list]:
        """ARMOR's Anchor Rollout for one round: ref_n samples from πref per candidate prompt, the keep rule,
        and each kept prompt's anchor (its first correct reference sample).

        Lazy (the default): candidates are the prompts whose on-policy rewards are not all equal, taken in draw
        order in chunks of ceil(ANCHOR_CHUNK_MARGIN · still needed), until `need` prompts are kept or none is left;
        the prompts behind them could not be kept this step anyway. Returns keep [P] bool and each prompt's anchor with its
        engine log-probs, (response, log-probs), or None if not kept."""
        a = self.cfg.algo.anchor
        P = len(prompts)
        passing = dynamic_sampling_keep(on_correct)
        order = [i for i in range(P) if passing[i] or not a.lazy]
        ref_correct = torch.zeros(P, a.ref_n, dtype=torch.bool)
        ref_resp: dict[int, list] = {}
        ref_logp: dict[int, list] = {}
        chunk_no = 0
        while order:
            n_keep = int(anchor_keep(on_correct, ref_correct).sum())
            if a.lazy and n_keep >= need:
                break
            take = len(order) if not a.lazy else math.ceil(ANCHOR_CHUNK_MARGIN * (need - n_keep))
            cand, order = order[:take], order[take:]
            seed = step_seed(self.cfg.seed, self.step, SeedPhase.ANCHOR, rnd, chunk_no)
            ref_responses, rc, ref_lps = self._sample_round(self.reference, [pids[i] for i in cand],
                                                            [prompts[i].answer for i in cand], a.ref_n, seed, tm)
            faults.point("anchor", self.step + 1)
            stats.ref_samples += len(rc)
            for j, i in enumerate(cand):
                sl = slice(j * a.ref_n, (j + 1) * a.ref_n)
                ref_correct[i] = torch.tensor(rc[sl])
                ref_resp[i] = ref_responses[sl]
                ref_logp[i] = ref_lps[sl]
            chunk_no += 1
        # the groups' layout is armor.anchors' (G-1 on-policy, then the first correct reference sample)
        g = assemble_anchor_groups(on_correct, ref_correct.float(), ref_correct)
        first = g.anchor_index
        return g.keep, [(ref_resp[i][int(first[i])], ref_logp[i][int(first[i])]) if g.keep[i] else None
                        for i in range(P)]

    # ---------------------------------------------------------------------------------------- update
    def train_step(self) -> dict:
        cfg = self.cfg
        tm, stats = PhaseTimes(), RolloutStats()
        t_start = time.perf_counter()
        groups = self.collect(tm, stats)

        row = {"step": self.step + 1}
        acc = sum(stats.correct) / max(1, len(stats.correct))
        lengths_all = torch.tensor(stats.lengths, dtype=torch.float32)
        correct_all = torch.tensor(stats.correct, dtype=torch.bool)
        L = cfg.lengths
        rewards_all = shaped_reward(correct_all, lengths_all, L.max_response, L.overlong_buffer, L.overlong_factor,
                                    enable=L.overlong_buffer > 0)
        row.update(reward_mean=float(rewards_all.mean()) if len(stats.correct) else 0.0, accuracy=acc,
                   response_length=float(lengths_all.mean()) if len(stats.lengths) else 0.0,
                   prompts_drawn=stats.prompts_drawn, prompts_kept=len(groups), rounds=stats.rounds,
                   anchors=sum(sum(g.is_anchor) for g in groups), ref_samples=stats.ref_samples,
                   shortfall=stats.shortfall)
        upd = self.update(groups, tm) if groups else {}
        row.update(upd)
        row["lr"] = self.scheduler.get_last_lr()[0]
        with warnings.catch_warnings():   # a step that kept no prompt made no optimizer.step(): still one RL step
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        self.step += 1
        row["reference_reset"] = self.maybe_reset_reference()
        if row["reference_reset"]:
            faults.point("reset", self.step)
        row.update(time_generate=tm.generate, time_score=tm.score, time_logprob=tm.logprob,
                   time_update=tm.update, tokens_generated=tm.tokens,
                   time_step=time.perf_counter() - t_start, total_step=self.cfg.step_offset + self.step)
        return row

    def update(self, groups: list[Group], tm: PhaseTimes) -> dict:
        """Steps 2-4 of Algorithm 1 on the kept groups: advantages, the frozen log-probs, μ optimizer steps;
        returns the update's metrics (mini-batch means, token means over the step)."""
        t0 = time.perf_counter()
        ub = self._update_batch(groups)
        plan = self._minibatch_plan(len(groups), ub.group_size, ub.batch.seq_lens)
        lp = self._frozen_logprobs(ub, plan)
        tm.logprob += time.perf_counter() - t0
        t1 = time.perf_counter()
        means = self._optimize(ub, plan, lp)            # fills in the first mini-batch's θold log-probs
        out = {**self._token_metrics(ub, plan, lp, groups), **means}
        tm.update += time.perf_counter() - t1
        return out

    def _update_batch(self, groups: list[Group]) -> UpdateBatch:
        """The kept groups as one padded token batch with rewards (+1/-1, overlong shaping) and group advantages."""
        a, L = self.cfg.algo, self.cfg.lengths
        G = len(groups[0].responses)
        prompt_ids = [g.prompt_ids for g in groups for _ in g.responses]
        batch = make_token_batch(prompt_ids, [r for g in groups for r in g.responses], self.pad_id).to(self.device)
        is_anchor = torch.tensor([x for g in groups for x in g.is_anchor], device=self.device)
        correct = torch.tensor([x for g in groups for x in g.correct], device=self.device)
        rewards = shaped_reward(correct, batch.response_mask.sum(-1).float(), L.max_response, L.overlong_buffer,
                                L.overlong_factor, enable=L.overlong_buffer > 0).view(len(groups), G)
        adv = group_advantages(rewards, a.advantage, k=a.qae_k).reshape(-1)
        return UpdateBatch(batch, batch.response_mask.float(), is_anchor, adv, G)

    def _minibatch_plan(self, n_prompts: int, G: int, seq_lens: torch.Tensor) -> MinibatchPlan:
        """The step's mini-batches (each epoch shuffles the kept prompts; a mini-batch holds mini_batch_prompts
        whole groups) and this rank's micro-batches of each. Several ranks: rank r computes its part of every
        mini-batch (armor.spmd), in micro-batches of rows or of tokens (armor.microbatch)."""
        cfg = self.cfg
        per_mb = cfg.batch.mini_batch_prompts
        minibatches = []
        for epoch in range(cfg.batch.epochs):
            g = torch.Generator().manual_seed(step_seed(cfg.seed, self.step, SeedPhase.MINIBATCH_ORDER, epoch))
            order = torch.randperm(n_prompts, generator=g).tolist()
            minibatches += [torch.tensor([p * G + j for p in order[s:s + per_mb] for j in range(G)],
                                         device=self.device) for s in range(0, n_prompts, per_mb)]
        W = self.dist.world_size
        micro = [microbatch.plan(rows, seq_lens, W, cfg.batch.micro_batch_responses,
                                 cfg.batch.micro_batch_tokens)[self.dist.rank] for rows in minibatches]
        local = [torch.cat(p) for p in micro]
        need = torch.zeros(n_prompts * G, dtype=torch.bool, device=self.device)
        for rows in local:
            need[rows] = True
        # `own`: the rows this rank accounts for in the step's token metrics (its parts of the first epoch)
        return MinibatchPlan(minibatches, micro, local, need, torch.cat(local[:math.ceil(n_prompts / per_mb)]))

    def _frozen_logprobs(self, ub: UpdateBatch, plan: MinibatchPlan) -> FrozenLogprobs:
        """Step 3: θold's log-probs (and entropy), πref's when the loss or the KL monitor reads them, the teacher's
        for OPD/MOPD, and the token advantages. θold = θ until the first optimizer step, so the first mini-batch's
        old log-probs are its own update forward pass, detached (ratio exactly 1, as verl does on-policy): only
        the other rows need a separate pass. OPD/MOPD need θold's log-probs of every row before any update."""
        a, temp = self.cfg.algo, self.cfg.rollout.temperature
        batch, mask, W = ub.batch, ub.mask, self.dist.world_size
        first = plan.local[0] if a.distill.mode == "none" else plan.local[0][:0]
        todo = plan.need.clone()
        todo[first] = False
        old_logp, entropy = torch.zeros_like(mask), torch.zeros_like(mask)
        if bool(todo.any()) or W > 1:       # with several ranks each pass is a collective: every rank runs it
            rest = todo.nonzero()[:, 0]
            old_logp[rest], entropy[rest] = self._logprobs(self.policy, batch, rest, temp, with_entropy=True)
        needs_ref = (a.kl.coef != 0.0 or "reference" in RATIOS[a.mix.variant].needs or a.reference.kl_monitor
                     or (a.distill.mode != "none" and self.teacher is self.reference))
        all_need = plan.need.nonzero()[:, 0]

        def frozen(model):   # [N, R]: every row on one rank; on several, this rank's rows (the others 0)
            lp = self._logprobs(model, batch, all_need, temp)[0]
            if W == 1:
                return lp
            full = torch.zeros_like(mask)
            full[all_need] = lp
            return full
        ref_logp = frozen(self.reference) if needs_ref else None
        tok_adv = ub.adv[:, None].expand_as(mask)
        if a.distill.mode != "none":
            teacher_logp = ref_logp if self.teacher is self.reference else frozen(self.teacher)
            tok_adv = (opd_token_advantages(teacher_logp, old_logp, mask) if a.distill.mode == "opd" else
                       mopd_token_advantages(ub.adv, teacher_logp, old_logp, mask, coef=a.distill.coef))
        return FrozenLogprobs(old_logp, entropy, ref_logp, tok_adv, todo)

    def _optimize(self, ub: UpdateBatch, plan: MinibatchPlan, lp: FrozenLogprobs) -> dict:
        """Step 4: one optimizer step per mini-batch; returns the mini-batch means of the loss's metrics,
        grad_norm and the number of updates. The loss is normalised by the whole mini-batch's token count (DAPO's
        token-mean over the mini-batch, not per rank or per micro-batch)."""
        cfg, a = self.cfg, self.cfg.algo
        mask, W, temp = ub.mask, self.dist.world_size, cfg.rollout.temperature
        sums: dict[str, float] = {}
        for i, rows in enumerate(plan.minibatches):
            mb_mask = mask[rows]            # the whole mini-batch's tokens: the normaliser is global
            normalizer = mb_mask.sum() if a.loss_agg == "token-mean" else torch.tensor(float(len(rows)))
            self.optimizer.zero_grad(set_to_none=True)
            mstats: dict[str, float] = {}
            for r in plan.micro[i]:
                weight = 1.0
                if len(r) == 0:             # a rank short of rows joins the collective with a zero-weight row
                    r, weight = rows[:1], 0.0
                fill = i == 0 and weight > 0 and not bool(lp.todo[r].all())
                logp, ent = self._forward(self.policy, ub.batch, r, temp, with_entropy=fill)
                if fill:
                    lp.old_logp[r], lp.entropy[r] = logp.detach(), ent
                loss, metrics = policy_loss(
                    logp, lp.old_logp[r], lp.tok_adv[r], mask[r], ratio_variant=a.mix.variant,
                    ref_logp=None if lp.ref_logp is None else lp.ref_logp[r], alpha=a.mix.alpha,
                    is_anchor=ub.is_anchor[r], eps_low=a.clip.eps_low, eps_high=a.clip.eps_high,
                    dual_clip_c=a.clip.dual_clip_c, loss_agg=a.loss_agg, normalizer=normalizer, kl_coef=a.kl.coef,
                    kl_estimator=a.kl.estimator)
                # FSDP2 averages gradients over ranks: W x (this rank's share of the global-normalised loss)
                (loss * (W * weight) if W > 1 else loss).backward()
                # token means weighted by this micro-batch's share of the mini-batch's tokens, sums as they are
                share = weight * float(mask[r].sum() / mb_mask.sum().clamp(min=1.0))
                for k, v in metrics.items():
                    mstats[k] = mstats.get(k, 0.0) + (weight if k in ADDITIVE_METRICS else share) * float(v)
                mstats["loss"] = mstats.get("loss", 0.0) + weight * float(loss.detach())
            if W > 1:                       # the mini-batch's metrics: every rank's parts summed
                keys = sorted(mstats)
                mstats = dict(zip(keys, self.dist.all_reduce_sum(
                    torch.tensor([mstats[k] for k in keys], dtype=torch.float64)).tolist()))
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.optim.grad_clip)
            self.optimizer.step()
            self._versions["policy"] += 1
            faults.point("update", self.step + 1)
            mstats["grad_norm"] = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
            for k, v in mstats.items():
                sums[k] = sums.get(k, 0.0) + v
        self.optimizer.zero_grad(set_to_none=True)
        n_updates = len(plan.minibatches)
        out = {k: v / max(1, n_updates) for k, v in sums.items()}
        out["updates"] = n_updates
        return out

    def _token_metrics(self, ub: UpdateBatch, plan: MinibatchPlan, lp: FrozenLogprobs,
                       groups: list[Group]) -> dict:
        """Token means over the step's on-policy tokens: entropy, |advantage|, the KL monitors (when πref's
        log-probs exist) and the training/inference mismatch (when the engine gave log-probs). Several ranks:
        each holds its own rows' log-probs, so the means are taken over all ranks."""
        mask, W = ub.mask, self.dist.world_size
        on_mask = mask * (~ub.is_anchor)[:, None].float()
        adv_abs = float(masked_mean(lp.tok_adv.abs(), mask))
        if W == 1:
            out = {"entropy": float(masked_mean(lp.entropy, on_mask)), "advantage_abs_mean": adv_abs}
            if lp.ref_logp is not None:
                out.update(kl_reverse=float(kl_reverse_estimate(lp.old_logp, lp.ref_logp, on_mask)),
                           kl_forward=float(kl_forward_estimate(lp.old_logp, lp.ref_logp, on_mask)))
        else:
            out = {"entropy": global_masked_mean(self.dist, lp.entropy, on_mask, plan.own),
                   "advantage_abs_mean": adv_abs}
            if lp.ref_logp is not None:
                lr = torch.clamp(lp.ref_logp - lp.old_logp, min=-20.0, max=20.0)
                k3 = torch.exp(lr) - lr - 1.0          # per-token estimators of objectives.kl_*_estimate
                fwd = torch.clamp(torch.exp(lr) * lr - torch.expm1(lr), min=0.0)
                out.update(kl_reverse=global_masked_mean(self.dist, k3, on_mask, plan.own),
                           kl_forward=global_masked_mean(self.dist, fwd, on_mask, plan.own))
        eng_lp, has_lp = pad_token_values([x for g in groups for x in g.engine_logprobs], mask.shape[1],
                                          self.device)
        if bool(has_lp.any()):              # training/inference mismatch on the sampled on-policy tokens
            m = on_mask * has_lp
            out["logprob_mismatch"] = (float(logprob_mismatch(eng_lp, lp.old_logp, m)) if W == 1 else
                                       global_masked_mean(self.dist, (eng_lp - lp.old_logp).abs() * m, m, plan.own))
        return out

    def _forward(self, model, batch, rows: torch.Tensor, temp: float, with_entropy: bool = False):
        """forward_logprobs of one micro-batch `rows`, [len(rows), R]: by tokens, the rows padded to their own
        longest only (TokenBatch.trim) and the result padded back to the step's R with zeros (masked)."""
        b = self.cfg.batch
        sub = batch.rows(rows)
        if b.micro_batch_tokens is None:
            return forward_logprobs(model, sub, temp, with_entropy=with_entropy, chunk_tokens=b.logprob_chunk_tokens)
        logp, ent = forward_logprobs(model, sub.trim(), temp, with_entropy=with_entropy,
                                     chunk_tokens=b.logprob_chunk_tokens)
        pad = (0, batch.response_mask.shape[1] - logp.shape[1])
        return F.pad(logp, pad), (F.pad(ent, pad) if ent is not None else None)

    @torch.no_grad()
    def _logprobs(self, model, batch, rows: torch.Tensor, temp: float, with_entropy: bool = False):
        """Log-probs (and entropy) of `rows` without gradients, [len(rows), R], in this rank's micro-batches
        (armor.microbatch.split). Several ranks: every rank runs as many micro-batches as the busiest one (each
        forward is a collective); the extra ones run row 0 and are dropped."""
        b = self.cfg.batch
        micro = microbatch.split(rows, batch.seq_lens, b.micro_batch_responses, b.micro_batch_tokens)
        if self.dist.distributed:
            micro = microbatch.equalize(micro, self.dist.all_gather_object(len(micro)))
        where = torch.empty(batch.input_ids.shape[0], dtype=torch.long, device=rows.device)
        where[rows] = torch.arange(len(rows), device=rows.device)
        R = batch.response_mask.shape[1]
        lp = torch.zeros(len(rows), R, device=rows.device)
        ent = torch.zeros(len(rows), R, device=rows.device) if with_entropy else None
        was_training = model.training
        model.eval()
        for r in micro:
            if len(r) == 0:
                self._forward(model, batch, rows.new_zeros(1), temp, with_entropy)
                continue
            out, e = self._forward(model, batch, r, temp, with_entropy)
            lp[where[r]] = out
            if e is not None:
                ent[where[r]] = e
        model.train(was_training)
        parallel.reshard(model)
        return lp, ent

    def maybe_reset_reference(self) -> bool:
        """Reference reset: θref <- θ every τ steps (until `until_step`, then πref stays frozen)."""
        rs = self.cfg.algo.reference.reset
        if rs.every is None or self.step % rs.every != 0:
            return False
        if rs.until_step is not None and self.step > rs.until_step:
            return False
        if self.dist.distributed:
            parallel.copy_local_shards(self.reference, self.policy)   # same mesh: no communication
        else:
            self.reference.load_state_dict(self.policy.state_dict())
        self.reference_step = self.step
        self._versions["reference"] += 1
        return True

    # ------------------------------------------------------------------------------------ validation
    @torch.no_grad()
    def validate(self) -> list[dict]:
        v = self.cfg.validation
        rows = []
        for name, problems in self.val_sets.items():
            params = SamplingParams(n=v.samples, temperature=v.temperature, top_p=v.top_p,
                                    max_new_tokens=self.cfg.lengths.max_response,
                                    seed=step_seed(self.cfg.seed, self.step, SeedPhase.VALIDATION))
            if self.shards == 1:
                self._serve(self.policy)
                recs = sample_and_grade(self.engine, self.tokenizer, problems, self.cfg.data.prompt_template,
                                        params, self.grader)
                recs = [(r.correct, r.length) for r in recs]
            else:                       # shard s of the problems seeded shard_seed(seed, s), gathered (armor.spmd)
                self._serve(self.policy)        # a collective on several ranks: before the shards
                def work(idx, s, problems=problems, params=params):
                    sp = dataclasses.replace(params, seed=shard_seed(params.seed, s))
                    return [(r.correct, r.length) for r in sample_and_grade(
                        self.engine, self.tokenizer, [problems[i] for i in idx], self.cfg.data.prompt_template,
                        sp, self.grader)]
                recs = [x for part in sharded_map(self.dist, self.shards, len(problems), work) if part
                        for x in part]
            correct = torch.tensor([c for c, _ in recs], dtype=torch.float32).view(len(problems), v.samples)
            value = float(avg_at_k(correct))
            faults.point("validate", self.step)
            rows.append({"step": self.step, "total_step": self.cfg.step_offset + self.step, "benchmark": name,
                         "metric": f"avg@{v.samples}", "k": v.samples, "value": value, "n_problems": len(problems),
                         "temperature": v.temperature, "top_p": v.top_p,
                         "response_length": sum(n for _, n in recs) / len(recs)})
        if rows:
            score = rows[0]["value"]
            if self.best_val is None or score > self.best_val[0]:
                self.best_val = (score, self.step)
        return rows

    # ------------------------------------------------------------------------------------ checkpoints
    def protected_steps(self) -> set[int]:
        prot = set(self.cfg.schedule.keep_steps)
        if self.best_val is not None:
            prot.add(self.best_val[1])
        if self.reference_step is not None:
            prot.add(self.reference_step)
        return prot

    def save(self) -> None:
        """The step's checkpoint (armor.checkpoint). Several ranks: every rank writes its shards of the policy, the
        optimizer and a differing πref (torch.distributed.checkpoint, what a resume on several ranks reads) and its
        RNG; the same weights gathered to rank 0 make the HF folder one rank writes (it loads as it is in
        transformers, vLLM, lm-eval; a one-rank resume reads it). Either layout resumes on any world size."""
        if not self.dist.distributed:
            self._write_checkpoint(self.optimizer.state_dict(), self.policy, None, None)
            return
        tmp = self.dist.all_gather_object(
            ckpt.begin_checkpoint(self.run_dir, self.step) if self.dist.is_main else None)[0]
        ref = self.reference if self.reference_step is not None and self.reference_step != self.step else None
        ckpt.save_sharded_state(tmp, self.policy, self.optimizer, self.dist.rank, reference=ref)
        weights = parallel.full_state_dict(self.policy, rank0_cpu=True)
        ref_weights = parallel.full_state_dict(ref, rank0_cpu=True) if ref is not None else None
        if self.dist.is_main:
            self._write_checkpoint(None, self.skeleton, weights, ref_weights, tmp=tmp)
        self.dist.barrier()

    def _write_checkpoint(self, optim: dict | None, model, weights, ref_weights, tmp: Path | None = None) -> None:
        ref = None
        if self.reference_step is not None and self.reference_step != self.step:
            ref = self.reference if ref_weights is None else self.skeleton
        state = {"step": self.step, "optimizer": optim, "world_size": self.dist.world_size,
                 "scheduler": self.scheduler.state_dict(), "data": self.stream.state_dict(),
                 "reference_step": self.reference_step, "best_val": self.best_val, "shards": self.shards,
                 "reference_source": self.ref_path if self.reference_step is None else f"step {self.reference_step}"}
        ckpt.save_checkpoint(self.run_dir, self.step, model, self.tokenizer, state, reference=ref,
                             weights=weights, reference_weights=ref_weights, tmp=tmp)
        faults.point("saved", self.step)
        ckpt.prune(self.run_dir, self.cfg.schedule.keep_last, self.protected_steps() | {self.step})

    # ------------------------------------------------------------------------------------------- loop
    def fit(self) -> Path:
        cfg, rd = self.cfg, self.run_dir
        if (rd / "DONE").is_file():
            print(f"{rd}: already finished (DONE); nothing to do")
            return rd
        self.start()
        # TensorBoard / W&B, fed the rows appended below (rank 0 alone writes the run's files)
        log = logging_backends.Backends(cfg, rd) if self.dist.is_main else None
        try:
            self._fit(log)
        finally:
            if log is not None:
                log.close()
        self.grader.close()
        faults.point("done", self.step)
        if self.dist.is_main:
            write_json_atomic(rd / "DONE", {"steps": self.step, "best_validation": self.best_val})
        self.dist.barrier()
        return rd

    def _fit(self, log: "logging_backends.Backends") -> None:
        from tqdm.auto import tqdm
        cfg, s = self.cfg, self.cfg.schedule
        rd = self.run_dir
        main = log is not None
        if self.step == 0 and s.validate_every > 0 and cfg.validation.at_start:
            for r in self.validate():
                if main:
                    append_jsonl(rd / "validation.jsonl", r)
                    log.validation(r)
        bar = tqdm(total=s.total_steps, initial=self.step, desc=cfg.name, dynamic_ncols=True,
                   disable=os.environ.get("ARMOR_PROGRESS", "1") == "0" or not main)
        last_val = None
        while self.step < s.total_steps:
            row = self.train_step()
            if main:
                append_jsonl(rd / "metrics.jsonl", row)
            faults.point("metrics", self.step)
            if main:
                log.metrics(row)
            if s.validate_every and self.step % s.validate_every == 0:
                for r in self.validate():
                    if main:
                        append_jsonl(rd / "validation.jsonl", r)
                        log.validation(r)
                    last_val = r["value"]
            if self.step % s.save_every == 0 or self.step == s.total_steps:
                self.save()
            bar.update(1)
            bar.set_postfix(acc=f"{row['accuracy']:.3f}", val="-" if last_val is None else f"{last_val:.3f}",
                            kept=row["prompts_kept"])
        bar.close()


def train(cfg: RunConfig) -> Path:
    return Trainer(cfg).fit()

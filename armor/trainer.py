"""ARMOR's Algorithm 1 in general form; every arm of the paper is a configuration of these parts.

One RL step (`train_step`):
  1. `collect`: repeat until B prompts are kept (at most rollout.max_rounds rounds):
       draw prompts -> |G| (|G|-1 with anchors) on-policy samples from θ -> grade -> shaped rewards
       [anchors] `_anchor_rollout`: ref_n samples from θref for the prompts that pass the on-policy filter
       keep rule: DAPO dynamic sampling, or ARMOR's anchor rule (on-policy rewards not all equal AND a
       correct reference sample that passes algo.anchor.filter, none by default; the first such is the
       anchor)
  2. `update`: group advantages (GRPO / QAE); OPD/MOPD token signals
  3. `_frozen_logprobs`: θold's log-probs (the first mini-batch's come from its own update forward pass, since
     θold = θ until the first optimizer step), θref's (armor.config.needs_reference_logprobs) and the
     teacher's
  4. `_optimize`: μ mini-batch updates of the objective (armor.objectives.policy_loss: plain / mixed /
     static-clip / off-policy ratio, clip-higher + dual-clip, optional β·KL, optional rollout correction
     of the on-policy tokens toward the engine's log-probs), AdamW, warm-up, gradient clipping
  5. `maybe_reset_reference`: every τ steps (until a given step) θref <- θ
  6. the metrics row (armor.health stops a run computing garbage); validation every k steps, a checkpoint
     when armor.checkpoint.CheckpointManager says it is due; a stop signal (armor.stop: SLURM's time-limit
     warning, preemption) saves the step and leaves for a requeue
The mathematics lives in armor.objectives / advantages / anchors / rewards; the models, the engine and the
checkpoints' writing in armor.models, their schedule and retention in armor.checkpoint; which rows meet in
a forward on which rank in armor.microbatch, how rollouts split over ranks in armor.spmd (every call here is
the same on any world size). This file orchestrates.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import signal
import warnings

import torch

from armor import checkpoint as ckpt
from armor import faults, health, parallel, run_folder, stop, watchdog
from armor.advantages import group_advantages
from armor.anchors import (ANCHOR_FILTERS, FilterContext, anchor_keep, assemble_anchor_groups,
                           dynamic_sampling_keep, filter_dropped)
from armor.config import RunConfig, needs_reference_logprobs
from armor.data import PromptStream, draw_size, load_prompts, load_validation_sets
from armor.microbatch import UpdateRows
from armor.models import Models, check_paths
from armor.objectives import (ADDITIVE_METRICS, LossConfig, kl_forward_tokens, kl_reverse_tokens,
                              logprob_gap_tokens, logprob_mismatch, mopd_token_advantages,
                              opd_token_advantages, pad_token_values, policy_loss, rollout_correction)
from armor.policy import make_token_batch
from armor.rewards import shaped_reward
from armor.spmd import call_seed, global_masked_mean, sharded_map
from armor.step_state import (PROBE_ROWS, FrozenLogprobs, Group, PhaseTimes, RolloutStats, Samples,
                              SeedPhase, UpdateBatch, engine_logprobs, mode_classifier, mode_shares,
                              step_seed, timed)
from common import fast
from common.distributed import Dist
from common.grading import Grader, extract_answer
from common.metrics import avg_at_k
from common.models import load_tokenizer
from common.rollout import SamplingParams
from common.sampling import encode_prompt, sample_and_grade

# the metric keys that must agree between an interrupted-and-resumed run and an uninterrupted one
DETERMINISTIC_KEYS = ("reward_mean", "accuracy", "response_length", "entropy", "clipfrac", "kl_reverse",
                      "kl_forward", "prompts_drawn", "prompts_kept", "anchors", "lr", "grad_norm", "loss")
# lazy anchors ask the reference about ceil(ANCHOR_CHUNK_MARGIN x still-needed) passing prompts at a time: a
# few more than needed, since a prompt whose ref_n samples are all wrong is not kept (a cost knob, not a paper
# number)
ANCHOR_CHUNK_MARGIN = 1.5
# the answer formats whose share among a step's anchors is logged (anchor_format_<m>, common.grading's modes)
ANCHOR_FORMATS = ("boxed", "answer_line")


def fused_adamw(device: torch.device) -> bool:
    """AdamW's fused kernel (one pass per tensor, several times faster than the loop on the CPU) where the
    device has one, by the device alone: elementwise, so FSDP2's shards (DTensor) update as one process does.
    Not a fast path (compute.fast): the same update to float rounding."""
    return device.type in ("cpu", "cuda")


class Trainer:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        # ---- everything that can be wrong with the inputs is checked before any work is spent
        faults.check_env()
        from armor import logging_backends
        logging_backends.check(cfg.logging)
        check_paths(cfg)
        run_folder.check(cfg)
        self.prompts = load_prompts(cfg.data.train, cfg.data.problem_field, cfg.data.answer_field)
        if cfg.data.max_prompts:
            self.prompts = self.prompts[:cfg.data.max_prompts]
        self.val_sets = load_validation_sets(cfg.validation.benchmarks, cfg.validation.max_problems)
        if cfg.threads or os.environ.get("ARMOR_THREADS"):
            torch.set_num_threads(cfg.threads or int(os.environ["ARMOR_THREADS"]))
        # world size 1 without torchrun
        # several ranks: a rank that stops advancing ends the run, named (armor.watchdog)
        self.dist = watchdog.watch(Dist.from_env(cfg.device, timeout_s=cfg.parallel.timeout_s), self.run_dir,
                                   cfg.parallel)
        self.device = self.dist.device
        # compute.fast on this device and rank count: `native` where it cannot run fails here, before any work
        self.fast = fast.choose(cfg.compute.fast, self.device.type, cfg.model.dtype, self.dist.distributed)
        self.ranks_per_engine = parallel.ranks_per_engine(cfg)    # > 1: a tensor-parallel vLLM engine
        self.shards = cfg.rollout.shards or self.dist.world_size // self.ranks_per_engine
        parallel.check_world_size(cfg, self.dist.world_size, self.shards,
                                  int(os.environ.get("LOCAL_WORLD_SIZE", self.dist.world_size)))
        self.tokenizer = load_tokenizer(cfg.model.path)
        self.pad_id = self.tokenizer.pad_token_id
        self.stream = PromptStream(self.prompts, cfg.seed, cfg.data.shuffle)
        # logging.answer_modes: the modes of the step's samples and anchors (decoded text; no draw, no update)
        self.classify = mode_classifier(cfg.logging.answer_modes) if cfg.logging.answer_modes else None
        # algo.anchor.filter: (problem, response text) -> may it anchor; None for `none` (the paper's rule:
        # nothing decoded, nothing called)
        af = cfg.algo.anchor
        self.anchor_filter = None if af.filter == "none" else functools.partial(
            ANCHOR_FILTERS[af.filter].fn, ctx=FilterContext(self.classify, tuple(af.exclude_modes)))
        self.checkpoints = ckpt.CheckpointManager(self.run_dir, cfg.schedule)   # when to save, what to keep
        self.step = 0
        self.best_val: tuple[float, int] | None = None
        self.val_curve: list[tuple[int, float]] = []     # (step, value) of the first validation set
        self.stopped: int | None = None                  # the signal that stopped the run for a requeue
        self._prompt_cache: dict[int, list[int]] = {}
        self._val_ids: dict[str, list[list[int]]] = {}      # validation set -> its prompts' ids
        self._started = False

    def start(self) -> "Trainer":
        """Open the run: rank 0 prepares the run folder (config.yaml, the resume point, torn JSONL lines,
        damaged checkpoints), then every rank loads the models and the engine (armor.models), the optimizer
        and the grader's workers, and restores the resume point's state. The constructor only checks and reads
        inputs; `fit` calls this, and so may a caller that wants to drive steps itself. Idempotent; returns
        self."""
        if self._started:
            return self
        self._started = True
        cfg, a, r = self.cfg, self.cfg.algo, self.cfg.rollout
        torch.manual_seed(cfg.seed)
        self.grader = Grader(num_workers=cfg.reward.grader_workers, timeout_s=cfg.reward.grader_timeout_s,
                             mode=cfg.reward.answer_mode, scorer=cfg.reward.scorer)
        # rank 0 prepares the run folder; every rank follows its resume point
        resume_from = self.dist.all_gather_object(
            run_folder.prepare(self.run_dir, cfg, self.fast) if self.dist.is_main else None)[0]
        # trainer_state.pt (the whole optimizer state of a one-rank run) is read once for the resume
        state = ckpt.load_state(self.run_dir, resume_from) if resume_from is not None else None
        self.models = Models(cfg, self.dist, self.tokenizer, self.fast).load(self.run_dir, resume_from, state)
        watchdog.hook_modules(self.dist, self.models.policy, self.models.reference, self.models.teacher)
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(self.models.policy.parameters(), lr=o.lr, betas=tuple(o.betas),
                                           eps=o.eps, weight_decay=o.weight_decay,
                                           fused=fused_adamw(self.device))
        warm = o.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
        rc = a.rollout_correction
        self.loss = LossConfig(ratio_variant=a.mix.variant, alpha=a.mix.alpha, eps_low=a.clip.eps_low,
                               eps_high=a.clip.eps_high, dual_clip_c=a.clip.dual_clip_c, loss_agg=a.loss_agg,
                               kl_coef=a.kl.coef, kl_estimator=a.kl.estimator, rollout_correction=rc.mode,
                               rollout_threshold=rc.threshold, rollout_threshold_lower=rc.threshold_lower,
                               rollout_level=rc.level)
        # stops a run whose engine samples other weights than it trains, or that keeps nothing (armor.health)
        self.health = health.HealthMonitor(health.mismatch_bound(r.max_logprob_mismatch,
                                                                 self.models.compute_dtype),
                                           r.max_steps_without_kept, r.engine)
        if resume_from is not None:
            self._restore(resume_from, state)
        return self

    def _restore(self, step: int, state: dict) -> None:
        self.models.restore_optimizer(self.run_dir, step, state, self.optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        self.stream.load_state_dict(state["data"])
        self.step = state["step"]
        self.best_val = state.get("best_val")
        self.val_curve = [tuple(x) for x in state.get("val_curve", [])]
        self.health.load_state_dict(state.get("health", {}))
        if state.get("shards", 1) != self.shards:
            warnings.warn(f"{self.run_dir}: the run sampled in {state.get('shards', 1)} rollout shard(s) and "
                          f"now samples in {self.shards} (rollout.shards, default the number of engines): "
                          "from here on its samples differ from an uninterrupted run's; set rollout.shards "
                          "to keep them",
                          stacklevel=2)

    def prompt_ids(self, p) -> list[int]:
        if p.index not in self._prompt_cache:
            ids = encode_prompt(self.tokenizer, p.problem, self.cfg.data.prompt_template)
            self._prompt_cache[p.index] = ids[-self.cfg.lengths.max_prompt:]
        return self._prompt_cache[p.index]

    # --------------------------------------------------------------------------------------- rollout
    def _sample_round(self, which: str, pids, golds, n: int, seed: int, tm: PhaseTimes) -> Samples:
        """n responses to each prompt from `which` ("policy" | "reference"), graded and rewarded,
        prompt-major: the call is cut into rollout.shards shards, each seeded on its own and gathered on every
        rank (armor.spmd; one shard: one generate call seeded `seed`)."""
        L = self.cfg.lengths
        with timed(tm, "generate"):
            self.models.serve(which)     # a collective on several ranks: every rank, whatever shards it draws

        def work(idx, s):
            ro = self._generate(which, [pids[i] for i in idx], n, call_seed(seed, s, self.shards), tm)
            correct = self._grade(ro.texts, [golds[idx[j]] for j in ro.prompt_index], tm)
            return ro.response_ids, correct, engine_logprobs(ro)
        parts = [p for p in sharded_map(self.dist, self.shards, len(pids), work, self.ranks_per_engine)
                 if p is not None]
        responses, correct = [x for p in parts for x in p[0]], [x for p in parts for x in p[1]]
        # the shaped reward of every response, once: +1/-1 and DAPO's overlong shaping
        rewards = shaped_reward(torch.tensor(correct, dtype=torch.bool),
                                torch.tensor([len(r) for r in responses], dtype=torch.float32),
                                L.max_response, L.overlong_buffer, L.overlong_factor,
                                enable=L.overlong_buffer > 0)
        return Samples(n, responses, correct, rewards.tolist(), [x for p in parts for x in p[2]])

    def _generate(self, which: str, prompt_ids: list[list[int]], n: int, seed: int, tm: PhaseTimes):
        r = self.cfg.rollout
        with timed(tm, "generate"):
            ro = self.models.generate(which, prompt_ids, SamplingParams(
                n=n, temperature=r.temperature, top_p=r.top_p, max_new_tokens=self.cfg.lengths.max_response,
                seed=seed))
        tm.tokens += ro.num_tokens
        return ro

    def _grade(self, texts: list[str], golds: list[str], tm: PhaseTimes) -> list[bool]:
        with timed(tm, "score"):
            verdicts = self.grader.grade(texts, golds, "math")
        return [bool(v.correct) for v in verdicts]

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
            # all B at first; with rollout.refill_margin, later rounds about as many as are still needed
            prompts = self.stream.take(draw_size(B - len(kept), full, len(kept), stats.prompts_drawn,
                                                 cfg.rollout.refill_margin))
            stats.prompts_drawn += len(prompts)
            stats.rounds += 1
            pids = [self.prompt_ids(p) for p in prompts]
            seed = step_seed(cfg.seed, self.step, SeedPhase.ON_POLICY, rnd)
            on = self._sample_round("policy", pids, [p.answer for p in prompts], n_on, seed, tm)
            faults.point("sample", self.step + 1)
            stats.add(on, pids, probe_rows=PROBE_ROWS if rnd == 0 else 0)
            if self.classify is not None:
                stats.modes += self._modes([prompts[j // n_on] for j in range(len(on.responses))],
                                           on.responses)
            on_correct = torch.tensor(on.correct, dtype=torch.float32).view(len(prompts), n_on)
            ref = None                      # with anchors: the reference samples of the prompts it sampled
            passes = None                   # with an anchor filter: their verdicts
            if a.distill.mode == "opd":
                keep = torch.ones(len(prompts), dtype=torch.bool)
            elif a.anchor.enabled:
                keep, ref, passes = self._anchor_rollout(prompts, pids, on_correct, B - len(kept), rnd, tm,
                                                         stats)
            elif a.dynamic_sampling:
                keep = dynamic_sampling_keep(on_correct)
            else:
                keep = torch.ones(len(prompts), dtype=torch.bool)
            take = keep.nonzero()[:, 0].tolist()[:B - len(kept)]       # the first that pass, B in all
            groups = assemble_anchor_groups([pids[i] for i in take], [prompts[i].answer for i in take],
                                            [on.prompt(i) for i in take],
                                            None if ref is None else [ref[i] for i in take],
                                            correct_only=a.anchor.correct_only,
                                            ref_pass=None if passes is None else [passes[i] for i in take])
            kept += groups
            if ref is not None:             # the kept anchors' lengths, formats and modes
                anchors = [g.responses[-1] for g in groups]
                texts = self.tokenizer.batch_decode(anchors, skip_special_tokens=True)
                stats.anchor_lengths += [len(x) for x in anchors]
                stats.anchor_formats += [[extract_answer(t, m) is not None for m in ANCHOR_FORMATS]
                                         for t in texts]
                if self.classify is not None:
                    stats.anchor_modes += [self.classify(prompts[i].problem, t) for i, t in zip(take, texts)]
        if len(kept) < B:
            msg = (f"step {self.step}: kept {len(kept)} of {B} prompts after rollout.max_rounds="
                   f"{cfg.rollout.max_rounds} rounds ({stats.prompts_drawn} drawn)")
            if cfg.rollout.on_shortfall == "error":
                raise RuntimeError(msg + "; raise rollout.max_rounds or set rollout.on_shortfall=proceed")
            stats.shortfall = B - len(kept)
        return kept

    def _modes(self, prompts: list, responses: list) -> list[str]:
        """The mode (logging.answer_modes) of each response to the prompt beside it, on the decoded text."""
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return [self.classify(p.problem, t) for p, t in zip(prompts, texts)]

    def _anchor_rollout(self, prompts, pids, on_correct: torch.Tensor, need: int, rnd: int, tm: PhaseTimes,
                        stats: RolloutStats) -> tuple[torch.Tensor, dict[int, Samples], dict | None]:
        """ARMOR's Anchor Rollout for one round: ref_n samples from πref per candidate prompt and the keep
        rule (armor.anchors.anchor_keep). Returns keep [P] bool, {prompt: its reference samples} of every
        prompt sampled and, with an anchor filter, {prompt: its samples' verdicts} (None without); a kept
        prompt's anchor is the first correct one that passes (anchors.assemble_anchor_groups). The prompts
        the filter drops (armor.anchors.filter_dropped) are counted in `stats`.

        Lazy (the default): candidates are the prompts whose on-policy rewards are not all equal, taken in
        draw order in chunks of ceil(ANCHOR_CHUNK_MARGIN · still needed), until `need` prompts are kept or
        none is left; the prompts behind them could not be kept this step anyway."""
        a = self.cfg.algo.anchor
        P = len(prompts)
        passing = dynamic_sampling_keep(on_correct)
        order = [i for i in range(P) if passing[i] or not a.lazy]
        ref_correct = torch.zeros(P, a.ref_n, dtype=torch.bool)
        ref: dict[int, Samples] = {}
        # with a filter: each sampled prompt's verdicts (an unsampled prompt's stay False, as its correct)
        ref_pass = None if self.anchor_filter is None else torch.zeros(P, a.ref_n, dtype=torch.bool)
        passes: dict[int, list[bool]] | None = None if ref_pass is None else {}
        chunk_no = 0
        while order:
            n_keep = int(anchor_keep(on_correct, ref_correct, ref_pass).sum())
            if a.lazy and n_keep >= need:
                break
            take = len(order) if not a.lazy else math.ceil(ANCHOR_CHUNK_MARGIN * (need - n_keep))
            cand, order = order[:take], order[take:]
            seed = step_seed(self.cfg.seed, self.step, SeedPhase.ANCHOR, rnd, chunk_no)
            drawn = self._sample_round("reference", [pids[i] for i in cand],
                                       [prompts[i].answer for i in cand], a.ref_n, seed, tm)
            faults.point("anchor", self.step + 1)
            stats.ref_samples += len(drawn.correct)
            for j, i in enumerate(cand):
                ref[i] = drawn.prompt(j)
                # correct_only false: any sample anchors (the wrong-anchor ablation)
                ref_correct[i] = torch.tensor(ref[i].correct) if a.correct_only else True
            if passes is not None:
                texts = self.tokenizer.batch_decode(drawn.responses, skip_special_tokens=True)
                for j, i in enumerate(cand):
                    passes[i] = [bool(self.anchor_filter(prompts[i].problem, t))
                                 for t in texts[j * a.ref_n:(j + 1) * a.ref_n]]
                    ref_pass[i] = torch.tensor(passes[i])
            chunk_no += 1
        stats.filter_dropped += int(filter_dropped(on_correct, ref_correct, ref_pass).sum())
        stats.filter_candidates += int(anchor_keep(on_correct, ref_correct).sum())
        return anchor_keep(on_correct, ref_correct, ref_pass), ref, passes

    # ---------------------------------------------------------------------------------------- update
    def train_step(self) -> dict:
        tm, stats = PhaseTimes(), RolloutStats()
        with self.models.engine.awake_through():     # vLLM: one wake and one sleep a collection
            groups = self.collect(tm, stats)
        row = {"step": self.step + 1, **stats.metrics(), "prompts_kept": len(groups), "rounds": stats.rounds,
               "anchors": sum(sum(g.is_anchor) for g in groups), "ref_samples": stats.ref_samples,
               "shortfall": stats.shortfall}
        if self.classify is not None:
            row.update(mode_shares(stats.modes, self.classify.modes, "mode_"))
            if self.cfg.algo.anchor.enabled:
                row.update(mode_shares(stats.anchor_modes, self.classify.modes, "anchor_mode_"))
        if self.cfg.algo.anchor.enabled:
            row.update(stats.anchor_metrics(ANCHOR_FORMATS))
        row.update(self.update(groups, tm) if groups else self._probe_mismatch(stats.probe))
        row["lr"] = self.scheduler.get_last_lr()[0]
        # a step that kept no prompt made no optimizer.step(): still one RL step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        self.step += 1
        row["reference_reset"] = self.maybe_reset_reference()
        if row["reference_reset"]:
            faults.point("reset", self.step)
        row.update(**tm.metrics(), total_step=self.cfg.step_offset + self.step)
        # garbage (engine and trainer disagree, nothing kept) stops the run here
        self.health.check(row)
        return row

    def update(self, groups: list[Group], tm: PhaseTimes) -> dict:
        """Steps 2-4 of Algorithm 1 on the kept groups: advantages, the frozen log-probs, μ optimizer steps;
        returns the update's metrics (mini-batch means, token means over the step)."""
        with timed(tm, "logprob"):
            ub = self._update_batch(groups)
            urows = self._update_rows(ub)
            frozen = self._frozen_logprobs(ub, urows)
        with timed(tm, "update"):
            means, frozen = self._optimize(ub, urows, frozen)    # θold complete: the first mini-batch's added
            return {**self._token_metrics(ub, urows, frozen), **means}

    def _update_batch(self, groups: list[Group]) -> UpdateBatch:
        """The kept groups as one padded token batch with their shaped rewards' group advantages."""
        G = len(groups[0].responses)
        batch = make_token_batch([g.prompt_ids for g in groups for _ in g.responses],
                                 [r for g in groups for r in g.responses], self.pad_id).to(self.device)
        rewards = torch.tensor([x for g in groups for x in g.rewards],
                               device=self.device).view(len(groups), G)
        adv = group_advantages(rewards, self.cfg.algo.advantage, k=self.cfg.algo.qae_k).reshape(-1)
        is_anchor = torch.tensor([x for g in groups for x in g.is_anchor], device=self.device)
        engine_lp = [x for g in groups for x in g.engine_logprobs]
        return UpdateBatch(batch, batch.response_mask.float(), is_anchor, adv, G, engine_lp)

    def _update_rows(self, ub: UpdateBatch) -> UpdateRows:
        """The update's rows on this rank (armor.microbatch.UpdateRows): each epoch shuffles the kept prompts
        (seeded by the step) into mini-batches of batch.mini_batch_prompts whole groups, each cut into this
        rank's micro-batches by the models' budget."""
        cfg, n = self.cfg, ub.mask.shape[0] // ub.group_size
        orders = [torch.randperm(n, generator=torch.Generator().manual_seed(
            step_seed(cfg.seed, self.step, SeedPhase.MINIBATCH_ORDER, epoch))).tolist()
            for epoch in range(cfg.batch.epochs)]
        return UpdateRows.of(orders, ub.group_size, cfg.batch.mini_batch_prompts, ub.batch.seq_lens,
                          self.models.budget, self.dist.world_size, self.dist.rank)

    def _frozen_logprobs(self, ub: UpdateBatch, urows: UpdateRows) -> FrozenLogprobs:
        """Step 3: θold's log-probs (and entropy) of this rank's rows, πref's when a step reads them, the
        teacher's for OPD/MOPD, and the token advantages; [N, R], 0 on rows this rank does not touch. θold = θ
        until the first optimizer step, so the first mini-batch's θold log-probs are its own update forward
        pass (ratio exactly 1, as verl does on-policy): `_optimize` adds them. OPD/MOPD need every row's
        first. Beside them the behaviour policy's: the engine's log-probs of every row, and the on-policy
        tokens that have them (the rollout correction's; an anchor's behaviour policy is πref, and the mixed
        ratio, not a correction, is what treats it)."""
        a, temp, mask = self.cfg.algo, self.cfg.rollout.temperature, ub.mask
        first_from_update = a.distill.mode == "none"

        def logprobs(which, rows, with_entropy=False):    # [N, R]: the values of `rows`, 0 elsewhere
            lp, ent = self.models.logprobs(which, ub.batch, rows, temp, with_entropy)
            full_lp, full_ent = torch.zeros_like(mask), torch.zeros_like(mask)
            full_lp[rows] = lp
            if ent is not None:
                full_ent[rows] = ent
            return full_lp, full_ent
        old_logp, entropy = logprobs("policy", urows.rows(skip_first=first_from_update), with_entropy=True)
        rows = urows.rows()
        ref_logp = logprobs("reference", rows)[0] if needs_reference_logprobs(self.cfg) else None
        tok_adv = ub.adv[:, None].expand_as(mask)
        if a.distill.mode != "none":
            teacher = self.models.teacher
            teacher_logp = ref_logp if teacher is self.models.reference else logprobs("teacher", rows)[0]
            tok_adv = (opd_token_advantages(teacher_logp, old_logp, mask) if a.distill.mode == "opd" else
                       mopd_token_advantages(ub.adv, teacher_logp, old_logp, mask, coef=a.distill.coef))
        rollout_logp, has_lp = pad_token_values(ub.engine_logprobs, mask.shape[1], self.device)
        return FrozenLogprobs(old_logp, entropy, ref_logp, tok_adv, first_from_update, rollout_logp,
                              mask * (~ub.is_anchor)[:, None].float() * has_lp)

    def _optimize(self, ub: UpdateBatch, urows: UpdateRows,
                  frozen: FrozenLogprobs) -> tuple[dict, FrozenLogprobs]:
        """Step 4: one optimizer step per mini-batch, its micro-batches' gradients accumulated
        (`_forward_backward`), clipped, AdamW. The loss is normalised by the whole mini-batch's token count
        (DAPO's token-mean over the mini-batch, not per rank or per micro-batch). Returns the mini-batch means
        of the loss's metrics, grad_norm and the number of updates; and θold's log-probs with the first
        mini-batch's own."""
        frozen = dataclasses.replace(frozen, old_logp=frozen.old_logp.clone(), entropy=frozen.entropy.clone())
        sums: dict[str, float] = {}
        for i, rows in enumerate(urows.minibatches):
            tokens = ub.mask[rows].sum()       # the whole mini-batch's tokens: the normaliser is global
            normalizer = tokens if self.loss.loss_agg == "token-mean" else torch.tensor(float(len(rows)))
            self.optimizer.zero_grad(set_to_none=True)
            mstats: dict[str, float] = {}
            for r in urows.micro[i]:
                # a rank short of rows joins the collective with a zero-weight row
                weight, r = (1.0, r) if len(r) else (0.0, rows[:1])
                own_pass = i == 0 and weight > 0 and frozen.first_from_update
                part = self._forward_backward(ub, frozen, r, weight, normalizer, tokens, own_pass)
                for k, v in part.items():
                    mstats[k] = mstats.get(k, 0.0) + v
            keys = sorted(mstats)           # the mini-batch's metrics: every rank's parts summed
            mstats = dict(zip(keys, self.dist.all_reduce_sum(
                torch.tensor([mstats[k] for k in keys], dtype=torch.float64)).tolist()))
            grad_norm = torch.nn.utils.clip_grad_norm_(self.models.policy.parameters(),
                                                       self.cfg.optim.grad_clip)
            self.optimizer.step()
            self.models.versions["policy"] += 1
            faults.point("update", self.step + 1)
            mstats["grad_norm"] = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor")
                                        else grad_norm)
            for k, v in mstats.items():
                sums[k] = sums.get(k, 0.0) + v
        self.optimizer.zero_grad(set_to_none=True)
        n_updates = len(urows.minibatches)
        out = {k: v / max(1, n_updates) for k, v in sums.items()}
        out["updates"] = n_updates
        return out, frozen

    def _forward_backward(self, ub: UpdateBatch, frozen: FrozenLogprobs, r: torch.Tensor, weight: float,
                          normalizer: torch.Tensor, tokens: torch.Tensor, own_pass: bool) -> dict:
        """One micro-batch `r` of a mini-batch holding `tokens` tokens: the policy's forward, the loss
        (armor.objectives.policy_loss, divided by `normalizer`) and its backward scaled by W·weight (FSDP2's
        mean over ranks undone; weight 0: a filler row). On `own_pass` the forward is θold's: its log-probs
        and entropy go into frozen's (the optimizer's copy). Returns the micro-batch's part of the
        mini-batch's metrics: sums by weight, token means by its share of the tokens, and the loss."""
        temp = self.cfg.rollout.temperature
        logp, ent = self.models.policy_forward(ub.batch, r, temp, with_entropy=own_pass)
        if own_pass:
            frozen.old_logp[r], frozen.entropy[r] = logp.detach(), ent
        loss, metrics = policy_loss(
            logp, frozen.old_logp[r], frozen.tok_adv[r], ub.mask[r], self.loss, is_anchor=ub.is_anchor[r],
            ref_logp=None if frozen.ref_logp is None else frozen.ref_logp[r], normalizer=normalizer,
            rollout_logp=frozen.rollout_logp[r], rollout_mask=frozen.rollout_mask[r])
        (loss * (self.dist.world_size * weight)).backward()
        share = weight * float(ub.mask[r].sum() / tokens.clamp(min=1.0))
        out = {k: (weight if k in ADDITIVE_METRICS else share) * float(v) for k, v in metrics.items()}
        out["loss"] = weight * float(loss.detach())
        return out

    def _token_metrics(self, ub: UpdateBatch, urows: UpdateRows, frozen: FrozenLogprobs) -> dict:
        """Token means over the step's on-policy tokens: entropy, |advantage|, the KL monitors (when πref's
        log-probs exist), the training/inference mismatch (when the engine gave log-probs) and, with a rollout
        correction, its ρ's mean/max/min, the weight's mean and the shares truncated / masked. Each rank holds
        its own rows' values: a mean is taken over all ranks (armor.spmd.global_masked_mean)."""
        mask, own = ub.mask, urows.own
        on_mask = mask * (~ub.is_anchor)[:, None].float()

        def mean(x, m):
            return global_masked_mean(self.dist, x, m, own)
        out = {"entropy": mean(frozen.entropy, on_mask),
               "advantage_abs_mean": mean(frozen.tok_adv.abs(), mask)}
        if frozen.ref_logp is not None:
            out.update(kl_reverse=mean(kl_reverse_tokens(frozen.old_logp, frozen.ref_logp), on_mask),
                       kl_forward=mean(kl_forward_tokens(frozen.old_logp, frozen.ref_logp), on_mask))
        m = frozen.rollout_mask
        if bool(m.any()):                   # training/inference mismatch on the sampled on-policy tokens
            out["logprob_mismatch"] = mean(logprob_gap_tokens(frozen.rollout_logp, frozen.old_logp, m), m)
            if self.loss.rollout_correction != "none":
                out.update(self._rollout_correction_metrics(frozen, own))
        return out

    def _rollout_correction_metrics(self, frozen: FrozenLogprobs, own: torch.Tensor) -> dict:
        """The rollout correction on the step's on-policy tokens with engine log-probs, over all ranks:
        rollout_is_mean/max/min of ρ = πθold/π_rollout before truncation or masking (verl's names), the mean
        of the weight w applied, and the shares truncated (tis) and masked (mis). In float64, the means as
        1 + mean(x − 1): a ρ within float32 rounding of 1 (an fp32 engine's) still shows."""
        c, m = self.loss, frozen.rollout_mask
        w, rho, cut = rollout_correction(frozen.old_logp.double(), frozen.rollout_logp.double(), m,
                                         c.rollout_correction, c.rollout_threshold, c.rollout_threshold_lower,
                                         c.rollout_level)
        mo = m[own] != 0
        mine = (float(rho[own][mo].max()), float(rho[own][mo].min())) if bool(mo.any()) else None
        ext = [x for x in self.dist.all_gather_object(mine) if x is not None]
        cut_frac = global_masked_mean(self.dist, cut.float(), m, own)
        return {"rollout_is_mean": 1.0 + global_masked_mean(self.dist, rho - 1.0, m, own),
                "rollout_is_max": max(x[0] for x in ext), "rollout_is_min": min(x[1] for x in ext),
                "rollout_is_weight_mean": 1.0 + global_masked_mean(self.dist, w - 1.0, m, own),
                "rollout_is_truncated_frac": cut_frac if c.rollout_correction == "tis" else 0.0,
                "rollout_is_masked_frac": cut_frac if c.rollout_correction == "mis" else 0.0}

    def _probe_mismatch(self, probe: list) -> dict:
        """logprob_mismatch on a step that kept nothing, over its first on-policy samples (RolloutStats.probe,
        the same rows on every rank): garbage sampling (a broken push) keeps nothing, and must still show."""
        probe = [x for x in probe if len(x[1]) and len(x[2])]
        if not probe:
            return {}
        batch = make_token_batch([p for p, _, _ in probe], [r for _, r, _ in probe],
                                 self.pad_id).to(self.device)
        mask = batch.response_mask.float()
        logp = self.models.logprobs("policy", batch, torch.arange(len(probe), device=self.device),
                                    self.cfg.rollout.temperature)[0]
        eng_lp, has_lp = pad_token_values([lp for _, _, lp in probe], mask.shape[1], self.device)
        return {"logprob_mismatch": float(logprob_mismatch(eng_lp, logp, mask * has_lp))}

    def maybe_reset_reference(self) -> bool:
        """Reference reset: θref <- θ every τ steps (until `until_step`, then πref stays frozen)."""
        rs = self.cfg.algo.reference.reset
        if rs.every is None or self.step % rs.every != 0:
            return False
        if rs.until_step is not None and self.step > rs.until_step:
            return False
        self.models.reset_reference(self.step)
        return True

    # ------------------------------------------------------------------------------------ validation
    @torch.no_grad()
    def validate(self, seed: int | None = None) -> list[dict]:
        """avg@k of the policy on each validation set: shard s of the problems seeded on its own, gathered
        (armor.spmd; one shard: one call with the step's validation seed, or `seed` when given: the noise
        floor's re-validations of fixed weights)."""
        with self.models.engine.awake_through():     # vLLM: one wake and one sleep a validation
            return self._validate(seed)

    def _validate(self, seed: int | None) -> list[dict]:
        v = self.cfg.validation
        rows = []
        for name, problems in self.val_sets.items():
            params = SamplingParams(n=v.samples, temperature=v.temperature, top_p=v.top_p,
                                    max_new_tokens=self.cfg.lengths.max_response,
                                    seed=step_seed(self.cfg.seed, self.step, SeedPhase.VALIDATION)
                                    if seed is None else seed)
            self.models.serve("policy")         # a collective on several ranks: before the shards

            ids = self._val_prompt_ids(name, problems)

            def work(idx, s, problems=problems, params=params, ids=ids):
                sp = dataclasses.replace(params, seed=call_seed(params.seed, s, self.shards))
                return [(r.correct, r.length) for r in sample_and_grade(
                    self.models.engine, self.tokenizer, [problems[i] for i in idx],
                    self.cfg.data.prompt_template, sp, self.grader, prompt_ids=[ids[i] for i in idx])]
            parts = sharded_map(self.dist, self.shards, len(problems), work, self.ranks_per_engine)
            recs = [x for part in parts if part for x in part]
            correct = torch.tensor([c for c, _ in recs], dtype=torch.float32).view(len(problems), v.samples)
            value = float(avg_at_k(correct))
            faults.point("validate", self.step)
            rows.append({"step": self.step, "total_step": self.cfg.step_offset + self.step, "benchmark": name,
                         "metric": f"avg@{v.samples}", "k": v.samples, "value": value,
                         "n_problems": len(problems), "temperature": v.temperature, "top_p": v.top_p,
                         "response_length": sum(n for _, n in recs) / len(recs)})
        if rows:
            score = rows[0]["value"]
            self.val_curve.append((self.step, score))
            if self.best_val is None or score > self.best_val[0]:
                self.best_val = (score, self.step)
        return rows

    def _val_prompt_ids(self, name: str, problems) -> list[list[int]]:
        """A validation set's prompts as token ids (whole, as sample_and_grade encodes them), encoded once."""
        if name not in self._val_ids:
            self._val_ids[name] = [encode_prompt(self.tokenizer, p.problem, self.cfg.data.prompt_template)
                                   for p in problems]
        return self._val_ids[name]

    # ------------------------------------------------------------------------------------ checkpoints
    def save(self, state_only: bool = False) -> None:
        """The step's checkpoint with the trainer's state beside the weights (armor.checkpoint's
        CheckpointManager: the models write it, it prunes); state_only: the training state alone, in the
        background (schedule.state_every)."""
        save = self.checkpoints.save_state if state_only else self.checkpoints.save
        save(self.models, self.step, self.optimizer, {
            "scheduler": self.scheduler.state_dict(), "data": self.stream.state_dict(),
            "best_val": self.best_val, "val_curve": self.val_curve, "shards": self.shards,
            "health": self.health.state_dict()})

    # ------------------------------------------------------------------------------------------- loop
    def fit(self):
        cfg, rd = self.cfg, self.run_dir
        if (rd / "DONE").is_file():
            print(f"{rd}: already finished (DONE); nothing to do")
            return rd
        watchdog.start(self.dist)               # from here a rank that stops advancing ends the run, named
        self.start()
        # metrics.jsonl, validation.jsonl, TensorBoard / W&B and DONE: rank 0 writes, the others do nothing
        out = run_folder.RunWriter(cfg, rd, enabled=self.dist.is_main)
        stopper = stop.StopRequest(cfg.schedule.stop_signals)
        try:
            self._fit(out, stopper)
        finally:
            stopper.close()
            out.close()
            watchdog.close(self.dist)
        self.grader.close()
        if self.stopped is not None:            # saved for a requeue: not DONE
            self.dist.barrier()
            return rd
        faults.point("done", self.step)
        out.done({"steps": self.step, "best_validation": self.best_val})
        self.dist.barrier()
        return rd

    def _fit(self, out: "run_folder.RunWriter", stopper: "stop.StopRequest") -> None:
        from tqdm.auto import tqdm
        cfg, s = self.cfg, self.cfg.schedule
        if self.step == 0 and s.validate_every > 0 and cfg.validation.at_start:
            for r in self.validate():
                out.validation(r)
        bar = tqdm(total=s.total_steps, initial=self.step, desc=cfg.name, dynamic_ncols=True,
                   disable=os.environ.get("ARMOR_PROGRESS", "1") == "0" or not self.dist.is_main)
        last_val = None
        while self.step < s.total_steps:
            row = self.train_step()
            out.metrics(row)
            if s.validate_every and self.step % s.validate_every == 0:
                for r in self.validate():
                    out.validation(r)
                    last_val = r["value"]
            self.stopped = stopper.agreed(self.dist)      # a stop signal on any rank: save this step, leave
            # a preemption's SIGTERM leaves only the cluster's grace: the training state alone, when the run
            # keeps them (schedule.state_every), unless the schedule saves this step anyway
            quick = self.stopped == signal.SIGTERM and bool(s.state_every)
            if self.checkpoints.due(self.step) or (self.stopped is not None and not quick):
                self.save()
            elif self.checkpoints.state_due(self.step) or self.stopped is not None:
                self.save(state_only=True)
            if self.stopped is not None:
                print(f"{self.run_dir}: stopped by signal {self.stopped} after saving step {self.step}; "
                      "rerun to resume", flush=True)
                break
            watchdog.step_done(self.dist, self.step)
            bar.update(1)
            bar.set_postfix(acc=f"{row['accuracy']:.3f}", val="-" if last_val is None else f"{last_val:.3f}",
                            kept=row["prompts_kept"])
        self.checkpoints.close()                          # a training state in flight completes
        bar.close()


def train(cfg: RunConfig):
    return Trainer(cfg).fit()

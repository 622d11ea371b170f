"""Model hosting: the policy, the frozen πref and teacher, the rollout engine that samples them, checkpoints.

    models = Models(cfg, dist, tokenizer).load(run_dir, resume_from, state)
    ro = models.generate("policy" | "reference", prompts, params)    # the engine serves that model's weights
    logp, ent = models.logprobs("policy" | "reference" | "teacher", batch, rows, temperature)   # no grad
    logp, ent = models.policy_forward(batch, rows, temperature)          # with grad, one micro-batch
    models.reset_reference(step)                                         # θref <- θ
    models.save(run_dir, step, optimizer, state)         # HF export + training state (when: armor.checkpoint)

One process: plain modules. Several ranks (torchrun): the policy's FSDP2 shards are its fp32 master weights,
πref and a teacher are frozen shards, all built on the meta device and filled from the one full copy rank 0
reads (or, on a resume, from each rank's own shards); the HF engine samples from a plain replica given the
full weights of whichever model it serves, vLLM gathers the shards itself. The trainer sees none of this:
every call above is the same on every world size (each is a collective on several ranks: all ranks call it
together).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from armor import checkpoint as ckpt
from armor import config
from armor import microbatch, parallel
from armor.policy import forward_logprobs
from common.fast import OFF, FastPaths, lean_forward
from common.models import DTYPES, build_on_meta, check_model_path, load_model, load_skeleton
from common.rollout import Rollout, SamplingParams, build_engine


def check_paths(cfg) -> str:
    """Check every model folder the run reads before any work; returns πref's source (its path, or the
    model)."""
    a = cfg.algo
    check_model_path(cfg.model.path, "model.path")
    ref_path = a.reference.path or cfg.model.path
    check_model_path(ref_path, "algo.reference.path")
    if a.distill.mode != "none" and a.distill.teacher_path:
        check_model_path(a.distill.teacher_path, "algo.distill.teacher_path")
    return ref_path


class Models:
    """The run's models and their rollout engine (see the module docstring). `versions` names the weights each
    model holds, ("policy", optimizer steps) or ("reference", resets), so that serving a version the engine
    holds already costs nothing; `reference_step` is the step whose policy πref holds (None: its source).
    `fast`: the run's fast paths (common.fast.choose of compute.fast; OFF: HF's forward throughout)."""

    def __init__(self, cfg, dist, tokenizer, fast: FastPaths = OFF):
        self.cfg, self.dist, self.tokenizer, self.fast = cfg, dist, tokenizer, fast
        self.device = dist.device
        self.ref_path = check_paths(cfg)
        self.reference_step: int | None = None
        self.versions = {"policy": 0, "reference": 0}
        self.budget = microbatch.Budget.of(cfg.batch)     # what one forward holds (the trainer's plan too)
        # several ranks, HF engine: the weights the replica holds
        self._replica_holds: tuple | None = None

    # ------------------------------------------------------------------------------------------ loading
    def load(self, run_dir: Path, resume_from: int | None, state: dict | None) -> "Models":
        """Load the policy (the model, or the resume point's), πref, the teacher and the engine; returns
        self."""
        cfg, a = self.cfg, self.cfg.algo
        src = ckpt.resume_dir(run_dir, resume_from) if resume_from is not None else None
        # a training state (no HF export) takes its config and first weights from the model, then its shards
        init_path = cfg.model.path if src is None or ckpt.is_state(src) else str(src)
        ref_path = self._reference_path(run_dir, resume_from, state)
        teacher_path = a.distill.teacher_path if a.distill.mode != "none" else ""
        self.replica = self.skeleton = None
        if not self.dist.distributed:
            pol_src, ref_src = self._sharded_sources(run_dir, resume_from, state)
            self.policy = self._load(init_path, sharded=pol_src)
            self.reference = self._load(ref_path, sharded=ref_src).requires_grad_(False)
            self.teacher = self._load(teacher_path).requires_grad_(False) if teacher_path else None
        else:
            pol_src, ref_src = self._sharded_sources(run_dir, resume_from, state)
            self.policy = self._load_sharded(init_path, sharded=pol_src)
            self.reference = self._load_sharded(ref_path, frozen=True, sharded=ref_src)
            self.teacher = self._load_sharded(teacher_path, frozen=True) if teacher_path else None
            # the HF engine samples from a plain copy of the served weights
            if cfg.rollout.engine == "hf":
                self.replica = self._load(init_path).eval().requires_grad_(False)
            self.skeleton = load_skeleton(init_path, cfg.model.trust_remote_code)   # the HF export's config
        self.policy.train()
        self.reference.eval()
        if a.distill.mode != "none":                # OPD/MOPD without a teacher path distil from πref (θ*)
            self.teacher = self.teacher.eval() if self.teacher is not None else self.reference
        if state is not None:
            self.reference_step = state["reference_step"]
        r = cfg.rollout
        self.engine = build_engine(r.engine, self.replica or self.policy, self.tokenizer,
                                   model_path=init_path, dtype=self.compute_dtype,
                                   gpu_memory_utilization=r.gpu_memory_utilization,
                                   tensor_parallel_size=r.tensor_parallel_size, seed=cfg.seed,
                                   enforce_eager=r.enforce_eager, fast=self.fast,
                                   seed_each_prompt=r.seed_each_prompt,
                                   max_model_len=cfg.lengths.max_prompt + cfg.lengths.max_response)
        return self

    @property
    def compute_dtype(self) -> str:
        """The dtype the policy's forward (and the engine) computes in."""
        return self.cfg.parallel.compute_dtype if self.dist.distributed else self.cfg.model.dtype

    def _load(self, path: str, sharded: tuple[Path, str] | None = None):
        """A plain model from an HF folder; with `sharded` (step folder, entry) its weights then come from the
        checkpoint's sharded state (the masters, where the HF export holds another dtype)."""
        m = self.cfg.model
        model = load_model(path, m.dtype, self.device, m.gradient_checkpointing, m.trust_remote_code)
        if sharded is not None:
            ckpt.load_sharded_weights(sharded[0], model, sharded[1])
        return model

    def _load_sharded(self, path: str, frozen: bool = False, sharded: tuple[Path, str] | None = None):
        """An FSDP2-sharded model (armor.parallel), built on the meta device on every rank and sharded, then
        filled either from a checkpoint's sharded state (`sharded` = (step folder, "model" | "reference"):
        each rank reads its own shards) or from the full copy of `path` that rank 0 alone reads into CPU
        memory. The policy's shards keep model.dtype (float32: the master weights); a frozen reference or
        teacher is stored in the compute dtype, which FSDP2 would gather it in anyway."""
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

    def _reference_path(self, run_dir: Path, resume_from: int | None, state: dict | None) -> str:
        """Where πref's weights are read: algo.reference.path (or the model), or, resuming a run whose πref
        was reset, the checkpoint (its own weights if the reset was at that step, else its reference/
        folder)."""
        if resume_from is None or state["reference_step"] is None:
            return self.ref_path
        d = ckpt.resume_dir(run_dir, resume_from)
        if ckpt.is_state(d):                  # its weights come from the state's shards (_sharded_sources)
            return self.ref_path
        # a sharded checkpoint holds a differing πref in sharded/ (its HF config: the step folder's)
        return str(d if state["reference_step"] == resume_from or not (d / "reference").is_dir()
                   else d / "reference")

    def _sharded_sources(self, run_dir: Path, resume_from: int | None, state: dict | None) -> tuple:
        """Where a resume reads the policy and πref as shards: (step folder, entry) each, or None to read the
        HF folder (a fresh start, a one-rank checkpoint in the model's dtype, πref never reset)."""
        if resume_from is None:
            return None, None
        d = ckpt.resume_dir(run_dir, resume_from)
        keys = ckpt.sharded_keys(d)
        if "model" not in keys:
            return None, None
        reference_step = state["reference_step"]
        if reference_step == resume_from:            # πref was reset to this very step's policy
            return (d, "model"), (d, "model")
        return (d, "model"), ((d, "reference") if reference_step is not None and "reference" in keys
                              else None)

    def model(self, which: str):
        return {"policy": self.policy, "reference": self.reference, "teacher": self.teacher}[which]

    # ------------------------------------------------------------------------------------------ serving
    def serve(self, which: str) -> bool:
        """Have the engine serve `which`'s current weights ("policy" | "reference"), versioned: a version the
        engine holds already costs nothing, so this runs before every generate call and a round with anchors
        swaps policy -> reference -> policy at most once. Returns whether weights moved. One process: the
        engine is given the module. Several ranks: a collective; an engine that gathers shards itself (vLLM)
        streams the sharded model's full tensors, the HF engine samples from the replica, given the full
        weights."""
        model, version = self.model(which), (which, self.versions[which])
        if self.replica is None:
            if self.engine.version == version:
                return False
            # its state dict must hold the shards (DTensors), not gathered weights
            parallel.reshard(model)
            return self.engine.sync_weights(model, version)
        if self._replica_holds != version:
            self.replica.load_state_dict(parallel.full_state_dict(model))
            parallel.reshard(model)
            self._replica_holds = version
        return self.engine.sync_weights(self.replica, version)

    def generate(self, which: str, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        """Sample from `which` ("policy" | "reference"): serve its weights, then generate."""
        self.serve(which)
        return self.engine.generate(prompts, params)

    # ---------------------------------------------------------------------------------------- log-probs
    def policy_forward(self, batch, rows: torch.Tensor, temp: float, with_entropy: bool = False):
        """forward_logprobs of the policy on one micro-batch `rows`, with grad, [len(rows), R]: by tokens, the
        rows padded to their own longest only (TokenBatch.trim) and the result padded back to the step's R."""
        return self._forward(self.policy, batch, rows, temp, with_entropy)

    def _forward(self, model, batch, rows: torch.Tensor, temp: float, with_entropy: bool = False):
        b = self.cfg.batch
        sub = batch.rows(rows)
        if not self.budget.by_tokens:
            return forward_logprobs(model, sub, temp, with_entropy=with_entropy,
                                    chunk_tokens=b.logprob_chunk_tokens, lean=self.fast.lean_forward)
        logp, ent = forward_logprobs(model, sub.trim(), temp, with_entropy=with_entropy,
                                     chunk_tokens=b.logprob_chunk_tokens, lean=self.fast.lean_forward)
        pad = (0, batch.response_mask.shape[1] - logp.shape[1])
        return F.pad(logp, pad), (F.pad(ent, pad) if ent is not None else None)

    @torch.no_grad()
    def logprobs(self, which: str, batch, rows: torch.Tensor, temp: float, with_entropy: bool = False):
        """Log-probs (and entropy) of `which` on `rows` without gradients, [len(rows), R], in this rank's
        micro-batches (armor.microbatch.split). Every rank runs as many micro-batches as the busiest one (each
        forward is a collective on several ranks); the extra ones run row 0 and are dropped."""
        model = self.model(which)
        micro = self.budget.split(rows, batch.seq_lens)
        counts = self.dist.all_gather_object(len(micro))
        R = batch.response_mask.shape[1]
        if max(counts) == 0:            # no rank has rows: no pass on any (nor a train/eval switch)
            return (torch.zeros(0, R, device=rows.device),
                    torch.zeros(0, R, device=rows.device) if with_entropy else None)
        micro = microbatch.equalize(micro, counts)
        where = torch.empty(batch.input_ids.shape[0], dtype=torch.long, device=rows.device)
        where[rows] = torch.arange(len(rows), device=rows.device)
        lp = torch.zeros(len(rows), R, device=rows.device)
        ent = torch.zeros(len(rows), R, device=rows.device) if with_entropy else None
        was_training = model.training
        # the lean forward reads no training flag where it supports the model (no dropout): no switch (HF's
        # train() re-kernelizes, ~0.3 ms a call)
        switch = was_training and not (self.fast.lean_forward and lean_forward.supports(model))
        if switch:
            model.eval()
        for r in micro:
            if len(r) == 0:
                self._forward(model, batch, rows.new_zeros(1), temp, with_entropy)
                continue
            out, e = self._forward(model, batch, r, temp, with_entropy)
            lp[where[r]] = out
            if e is not None:
                ent[where[r]] = e
        if switch:
            model.train(was_training)
        parallel.reshard(model)
        return lp, ent

    # ------------------------------------------------------------------------------------ reset, saving
    def reset_reference(self, step: int) -> None:
        """The reference reset θref <- θ (shard by shard on several ranks: no communication)."""
        parallel.copy_local_shards(self.reference, self.policy)
        self.reference_step = step
        self.versions["reference"] += 1

    @property
    def export_dtype(self) -> str:
        """The dtype of a checkpoint's HF export (armor.config.export_dtype)."""
        return config.export_dtype(self.cfg)

    def save(self, run_dir: Path, step: int, optimizer, state: dict) -> None:
        """Write the step's checkpoint (armor.checkpoint; when to save and what to keep is its
        CheckpointManager's). `state`: the trainer's part of trainer_state.pt. One process exporting in the
        model's dtype: the HF folder and the whole optimizer state (the tiny and smoke worlds). Otherwise
        every rank writes its shards of the policy (the fp32 masters), the optimizer and a differing πref
        (torch.distributed.checkpoint, what a resume of any world size reads), its RNG, and its part of the HF
        export in schedule.export_dtype (sharded safetensors with their index: it loads as it is in
        transformers, vLLM, lm-eval); each rank hashes its own files and rank 0 writes the manifest. A
        collective on several ranks."""
        dist = self.dist
        keep_ref = self.reference_step is not None and self.reference_step != step
        state = {**state, "step": step, "world_size": dist.world_size, "reference_step": self.reference_step,
                 "reference_source": self.ref_path if self.reference_step is None
                 else f"step {self.reference_step}"}
        if not dist.distributed and self.export_dtype == self.cfg.model.dtype:
            state["optimizer"] = optimizer.state_dict()
            ckpt.save_checkpoint(run_dir, step, self.policy, self.tokenizer, state,
                                 reference=self.reference if keep_ref else None)
        else:
            tmp = dist.all_gather_object(ckpt.begin_checkpoint(run_dir, step) if dist.is_main else None)[0]
            own = ckpt.save_sharded_state(tmp, self.policy, optimizer, dist.rank,
                                          reference=self.reference if keep_ref else None)
            index, part = ckpt.export_parts(tmp, self.policy, DTYPES[self.export_dtype], dist.rank,
                                            dist.world_size)
            hashed = {k: v for d in dist.all_gather_object({**own, **part}) for k, v in d.items()}
            if dist.is_main:
                src = self.skeleton or self.policy
                ckpt.finish_checkpoint(run_dir, step, tmp, src.config, self.tokenizer,
                                       {**state, "optimizer": None}, DTYPES[self.export_dtype], index, hashed,
                                       getattr(src, "generation_config", None))

    def restore_optimizer(self, run_dir: Path, step: int, state: dict, optimizer) -> None:
        """The optimizer's state from a checkpoint of any world size; and this rank's RNG (its own when the
        world size is the one that wrote it, else the saved one)."""
        if state["optimizer"] is None:        # written by several ranks: the optimizer's shards
            ckpt.load_sharded_optimizer(ckpt.resume_dir(run_dir, step), self.policy, optimizer)
        else:
            ckpt.load_optimizer_state(self.policy, optimizer, state["optimizer"])
        same_world = state.get("world_size", 1) == self.dist.world_size
        own = ckpt.rank_rng_state(ckpt.resume_dir(run_dir, step), self.dist.rank) if same_world else None
        ckpt.set_rng_state(own or state["rng"])

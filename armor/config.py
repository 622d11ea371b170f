"""One typed config object per run: dataclasses, YAML presets, dotted overrides, validated once.

    cfg = load_config("reproduce/presets/tiny.yaml", ["algo.mix.alpha=0.875", "seed=1"])

A YAML file may name a `base:` file (relative to itself) whose values it overrides (deep merge), so an
arm is a few lines on top of a preset. Every error names the dotted key and the offending value, and is
raised before any work is spent (ConfigError). Each field carries its help text (metadata["help"]):
`python -m armor.train --help [SECTION]` prints it, and docs/config.md is generated from it
(armor/config_doc.py).

A preset also carries sections that other tools own (FOREIGN_SECTIONS: the experiment driver's `protocol:`).
The loader sets them aside unread and unvalidated (RunConfig.foreign) and to_dict / dump_config write them
back verbatim, so the run's config.yaml still holds them for their owners (eval.evaluate --run reads
protocol.eval_benchmarks there). Any other unknown key, at any depth, is an error naming it.

One module on purpose: every section's dataclass with its fields' help, the loader and the one validation
pass sit together, so a reader sees each key, its default, its help and its check in one file.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from common.yaml_config import ConfigError, read_yaml  # noqa: F401  (armor.config's errors and presets)


# ----------------------------------------------------------------------------------------------- schema
# Top-level sections of a preset owned by other tools: the trainer neither reads nor validates them; it keeps
# them verbatim (RunConfig.foreign) and writes them back into the run's config.yaml. Section -> its owner.
FOREIGN_SECTIONS: dict[str, str] = {
    "protocol": "the experiment driver's continual-training protocol (its keys: docs/protocol.md)",
}

# Each field's help lives with the field (metadata["help"]): `python -m armor.train --help` prints it and
# docs/config.md is generated from it (`python -m armor.train --help-markdown > docs/config.md`).
def _f(default: Any = dataclasses.MISSING, help: str = "", factory: Any = dataclasses.MISSING,
       registry: str = ""):
    """A dataclass field with its help text (metadata["help"]). registry: "module:NAME" of the Registry
    (common.registry; armor.registry's for the trainer's variants) whose names are the field's choices
    (validate() checks them; --help lists them)."""
    meta = {"help": help, **({"registry": registry} if registry else {})}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def registry_of(spec: str):
    """The Registry a field's metadata names ("armor.objectives:RATIOS"), imported on demand (armor's
    registries import torch)."""
    import importlib
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass
class ModelConfig:
    """The policy's initial weights (θ0, or θ* in stage 2)."""
    path: str = _f("", "HF folder or hub id of the policy's initial weights (θ0 or θ*)")
    dtype: Literal["float32", "bfloat16", "float16"] = _f("float32", "parameter dtype of the policy, πref "
                                                                     "and the teacher")
    trust_remote_code: bool = _f(False, "let transformers run the model folder's own modelling code")
    gradient_checkpointing: bool = _f(False, "recompute activations in the backward pass (memory for time)")
    display_name: str = _f("", "the model's name in reports, tables and figure titles; \"\" = the last part "
                               "of model.path (read by reproduce/ and figures/, not by the trainer)")


@dataclass
class DataConfig:
    """The training prompts."""
    train: str = _f("", ".jsonl / .parquet file of training prompts")
    problem_field: str = _f("problem", "dotted path into a row; a list of chat messages takes the last one")
    answer_field: str = _f("answer", "dotted path, e.g. reward_model.ground_truth")
    prompt_template: Literal["plain", "qwen_math", "dapo"] = _f("plain", "how a problem becomes the prompt "
                                                                         "(common/benchmarks.py TEMPLATES)")
    shuffle: bool = _f(True, "draw prompts in a seeded random order (resumable) instead of file order")
    max_prompts: Optional[int] = _f(None, "use only the first N prompts of the file (after shuffling)")


@dataclass
class RolloutConfig:
    """Sampling the on-policy (and reference) responses of each step."""
    engine: Literal["hf", "vllm"] = _f("hf", "hf: in-process transformers sampler (CPU/GPU); vllm: a vLLM "
                                             "engine per rank (GPU; its CPU build runs the tests)")
    temperature: float = _f(1.0, "sampling temperature of training rollouts (log-probs use the same)")
    top_p: float = _f(1.0, "nucleus sampling threshold of training rollouts")
    gen_batch_prompts: int = _f(0, "prompts drawn per generation round (0 = same as batch.prompts_per_step)")
    max_rounds: int = _f(10, "generation rounds per step before giving up on a full batch")
    on_shortfall: Literal["error", "proceed"] = _f("proceed", "after max_rounds: fail, or train on what was "
                                                              "kept")
    refill_margin: Optional[float] = _f(
        None, "rounds after the first draw only ceil(refill_margin * still-needed / keep rate so far) "
              "prompts (at most gen_batch_prompts); null = every round draws gen_batch_prompts (verl's "
              "DAPO). Kept prompts are the first B that pass in stream order either way, so this changes "
              "what a step costs, not what it trains on")
    gpu_memory_utilization: float = _f(0.6, "vllm only: share of each GPU's memory the engine takes while it "
                                            "generates (weights + KV cache; it sleeps during the update)")
    tensor_parallel_size: int = _f(
        1, "vllm only: GPUs per engine; the trainer's engine is this many consecutive ranks (vLLM's tensor-"
           "parallel groups under external_launcher), which sample the same shards together; must divide the "
           "ranks per node and the world size")
    enforce_eager: bool = _f(False, "vllm only: no CUDA graphs or torch.compile (start-up in seconds, slower "
                                    "decoding; the real-vLLM tests set it)")
    seed_each_prompt: bool = _f(
        False, "vllm only: give every prompt of a generate call its own seed (bitwise replay of a prompt "
               "whatever else shares its call), which puts vLLM's sampler on its per-request generator "
               "loop; false = one seed a call, vLLM drawing every request from it "
               "(common/rollout/vllm_engine.py, Seeds)")
    max_logprob_mismatch: Optional[float] = _f(
        None, "stop the run when logprob_mismatch (mean |log p_engine - log p_trainer| over a step's "
              "on-policy tokens) exceeds this: the engine is not sampling the weights being trained. null = "
              "by the engine's compute dtype: 0.1 in bfloat16/float16, 0.001 in float32 (1e9: never). With "
              "top_p < 1 the engine's log-probs are renormalised over the nucleus, so the gap includes "
              "that: raise it")
    max_steps_without_kept: Optional[int] = _f(
        5, "stop the run when this many consecutive steps keep no prompt (nothing learnable: every group's "
           "rewards equal, or no anchor); null = never")
    shards: Optional[int] = _f(
        None, "each generation call is cut into this many shards, each sampled with its own seed and "
              "gathered (armor/spmd.py); a prompt's samples depend on its shard, not on the rank or world "
              "size that drew it. null = the number of engines: the world size / "
              "rollout.tensor_parallel_size (1 on one process: one generate call per round, as before)")


@dataclass
class ComputeConfig:
    """How the same functions are computed: the CPU fast paths (common/fast/, docs/fast_paths.md)."""
    fast: Literal["auto", "off", "native"] = _f(
        "auto", "auto: on a one-process CPU float32 run, the lean forward (update) and the static-KV decoder "
                "(hf engine) for Qwen2/Qwen3/Llama layouts, elsewhere (GPU, FSDP2) HF's forward; off: HF's "
                "forward everywhere; native: auto's paths plus the compiled decode kernel (a C compiler, "
                "CPU, float32, one process, the hf engine), else the run fails at its start")


@dataclass
class ParallelConfig:
    """Several ranks (torchrun): FSDP2 data parallelism (armor/parallel.py, armor/spmd.py)."""
    compute_dtype: Literal["float32", "bfloat16"] = _f(
        "float32", "dtype FSDP2 gathers parameters in for forward and backward (bf16 on GPU); the sharded "
                   "parameters stay model.dtype (float32: the master weights) and gradients reduce in "
                   "float32")
    cpu_offload: bool = _f(False, "keep parameter shards in CPU memory (FSDP2 CPUOffloadPolicy)")
    timeout_s: float = _f(1800.0, "collective timeout (s): a rank that failed makes the others error, not "
                                  "hang; must outlast the longest wait, a rollout round or rank 0's save")
    stall_steps: float = _f(3.0, "several ranks: when no rank has advanced (a collective, a forward, a "
                                 "step's end; armor/watchdog.py) for stall_steps x max(the longest step so "
                                 "far, stall_min_s) seconds, the run ends naming the stuck rank, instead of "
                                 "waiting out timeout_s; 0 = off")
    stall_min_s: float = _f(600.0, "the watchdog's floor for a step's time (s): before the first step ends "
                                   "it waits stall_steps x this")


@dataclass
class LengthConfig:
    """Prompt and response lengths, overlong shaping."""
    max_prompt: int = _f(2048, "prompt tokens kept (the last N)")
    max_response: int = _f(8192, "response tokens sampled at most (L_max)")
    overlong_buffer: int = _f(4096, "L_buf: responses longer than max_response - L_buf are penalized "
                                    "linearly; 0 disables overlong shaping")
    overlong_factor: float = _f(1.0, "penalty at max_response (DAPO's overlong reward shaping)")


@dataclass
class BatchConfig:
    """Prompts, groups and updates per RL step."""
    prompts_per_step: int = _f(512, "B: prompts kept per RL step")
    group_size: int = _f(16, "|G|: responses per prompt (with anchors: |G|-1 on-policy + 1 anchor)")
    mini_batch_prompts: int = _f(32, "prompts per optimizer update; μ = epochs * B / mini_batch_prompts")
    epochs: int = _f(1, "passes over the step's batch")
    micro_batch_responses: int = _f(64, "responses per forward/backward (gradient accumulation; memory only)")
    micro_batch_tokens: Optional[int] = _f(
        None, "fill each forward/backward with rows up to this many tokens (rows x the micro-batch's longest "
              "prompt+response), padded to its own longest row, rows balanced over ranks by tokens "
              "(armor/microbatch.py); null = batch.micro_batch_responses rows, padded to the step's longest. "
              "Must be >= lengths.max_prompt + lengths.max_response. Memory and speed only: values are the "
              "same")
    logprob_chunk_tokens: Optional[int] = _f(
        None, "compute the lm_head and log-softmax over this many response positions at a time, each chunk "
              "recomputed in backward (armor.policy.chunked_logprobs): memory no longer grows with response "
              "length x vocabulary; null = all positions at once. Values are the same")

    @property
    def updates_per_step(self) -> int:
        return self.epochs * self.prompts_per_step // self.mini_batch_prompts


@dataclass
class ClipConfig:
    """PPO clipping: clip-higher (ε_low, ε_high) and dual-clip."""
    eps_low: float = _f(0.2, "ε_low: the ratio's lower clip bound is 1 - ε_low")
    eps_high: float = _f(0.28, "ε_high: the ratio's upper clip bound is 1 + ε_high (clip-higher)")
    dual_clip_c: Optional[float] = _f(10.0, "dual-clip constant c for negative advantages; null disables "
                                            "dual-clip")


@dataclass
class KLConfig:
    """Loss-level KL penalty to πref."""
    coef: float = _f(0.0, "β of the loss-level penalty β·KL(πθ‖πref); 0 = off")
    estimator: str = _f("k3", "KL estimator of the penalty (Schulman's k1/k2/k3)",
                        registry="armor.objectives:KL_ESTIMATORS")


@dataclass
class AnchorConfig:
    """ARMOR's Anchor Rollout."""
    enabled: bool = _f(False, "ARMOR's Anchor Rollout: one correct πref sample joins each kept group")
    ref_n: int = _f(4, "reference samples per prompt")
    lazy: bool = _f(True, "sample references only for prompts that pass the on-policy filter, and only for "
                          "as many of them (in draw order) as may still be kept; the anchor is the first "
                          "correct of the ref_n samples either way")
    correct_only: bool = _f(True, "only a correct πref sample anchors a group (the paper); false: the first "
                                  "πref sample anchors it, right or wrong (the paper's §4 ablation: wrong "
                                  "anchors destabilise training)")
    filter: str = _f(
        "none", "a predicate on (problem, response) that a reference sample must also pass to anchor a group "
                "(the keep rule then needs a correct sample that passes; a prompt whose samples all fail is "
                "dropped like one without a correct sample, counted in anchor_filter_dropped): none = the "
                "paper's rule; exclude_modes = an oracle that rejects the modes of exclude_modes by the "
                "world's classifier (logging.answer_modes), which the paper's ARMOR does not have",
        registry="armor.anchors:ANCHOR_FILTERS")
    exclude_modes: list[str] = _f(
        factory=list, help="the modes (names of logging.answer_modes' classifier, e.g. the toy world's "
                           "shortcut) that filter=exclude_modes rejects; read by that filter only")


@dataclass
class MixConfig:
    """The importance ratio of the surrogate."""
    variant: str = _f(
        "plain", "plain: πθ/πθold; mixed: ARMOR's π_mix ratio; static_clip: plain ratio, clip 1 ± ε/α; "
                 "offpolicy_anchor: the anchor's tokens use an off-policy ratio (needs anchors)",
        registry="armor.objectives:RATIOS")
    alpha: float = _f(1.0, "π_mix = α·πθ + (1−α)·πref ; static_clip widens ε to ε/α")


@dataclass
class ResetConfig:
    """Reference reset θref ← θ."""
    every: Optional[int] = _f(None, "τ: θref ← θ every τ steps (null = never)")
    until_step: Optional[int] = _f(None, "stop resetting after this step (then πref frozen)")


@dataclass
class ReferenceConfig:
    """The reference policy πref."""
    path: str = _f("", "πref's weights; \"\" = same as model.path (continual protocol)")
    reset: ResetConfig = _f(factory=ResetConfig, help="reference resets")
    kl_monitor: bool = _f(True, "log reverse/forward KL to πref every step. It costs one reference forward "
                                "pass, which arms whose loss never reads πref (DAPO, QAE) skip when this is "
                                "off")


@dataclass
class DistillConfig:
    """On-policy distillation (OPD / MOPD baselines)."""
    mode: Literal["none", "opd", "mopd"] = _f("none", "none; opd: the teacher's token log-ratio is the "
                                                      "advantage; mopd: outcome advantage + coef × that "
                                                      "signal")
    teacher_path: str = _f("", "\"\" = the reference (θ*)")
    coef: float = _f(1.0, "weight of the token-level teacher signal (MOPD)")


# each on-policy token's policy-gradient loss is weighted by a constant from ρ = πθold/π_rollout, the
# trainer's θold log-prob over the engine's (TIS: Yao et al. 2025; masked IS: IcePop, Liu et al. 2025; verl's
# algorithm.rollout_correction); anchor tokens are not corrected (why: armor/objectives.py)
@dataclass
class RolloutCorrectionConfig:
    """Rollout–training mismatch correction of the on-policy tokens (off in the paper presets)."""
    mode: Literal["none", "tis", "mis"] = _f(
        "none", "each on-policy token's surrogate × w, ρ = πθold/π_rollout (the engine's log-prob): none; "
                "tis: truncated IS, w = min(ρ, C); mis: masked IS, w = ρ inside [threshold_lower, C], 0 "
                "outside (the token stays in the loss's token count)")
    threshold: Optional[float] = _f(None, "C (> 1), required by tis and mis (verl's rollout_is_threshold; "
                                          "typical 2)")
    threshold_lower: Optional[float] = _f(None, "mis only: the lower bound in [0, 1); null = 1/C; 0 = mask "
                                                "only ρ > C")
    level: Literal["token", "sequence"] = _f("token", "token: ρ per token; sequence: ρ of the whole response "
                                                      "(the product over its tokens), for every token of it")


@dataclass
class AlgoConfig:
    """The objective: advantages, loss, clipping, KL, anchors, ratio, reference, distillation."""
    advantage: str = _f("grpo", "group baseline: GRPO mean/std, Dr.GRPO (no std), QAE quantile",
                        registry="armor.advantages:ADVANTAGES")
    qae_k: float = _f(0.45, "QAE's quantile k of the group baseline")
    loss_agg: str = _f("token-mean", "how token losses become the batch loss (DAPO: token-mean)",
                       registry="armor.objectives:LOSS_AGGREGATIONS")
    dynamic_sampling: bool = _f(True, "DAPO's dynamic sampling: keep only prompts whose rewards are not all "
                                      "equal")
    clip: ClipConfig = _f(factory=ClipConfig, help="PPO clipping")
    kl: KLConfig = _f(factory=KLConfig, help="KL penalty")
    anchor: AnchorConfig = _f(factory=AnchorConfig, help="Anchor Rollout")
    mix: MixConfig = _f(factory=MixConfig, help="importance ratio")
    reference: ReferenceConfig = _f(factory=ReferenceConfig, help="reference policy")
    distill: DistillConfig = _f(factory=DistillConfig, help="OPD / MOPD")
    rollout_correction: RolloutCorrectionConfig = _f(factory=RolloutCorrectionConfig,
                                                     help="rollout–training mismatch correction")


@dataclass
class OptimConfig:
    """AdamW with linear warm-up and gradient clipping."""
    lr: float = _f(1e-6, "learning rate after warm-up")
    warmup_steps: int = _f(10, "RL steps of linear learning-rate warm-up (0 = none)")
    weight_decay: float = _f(0.1, "AdamW weight decay")
    grad_clip: float = _f(1.0, "max global gradient norm per update")
    betas: list[float] = _f(factory=lambda: [0.9, 0.999], help="AdamW (β1, β2)")
    eps: float = _f(1e-8, "AdamW ε")


@dataclass
class RewardConfig:
    """Outcome reward: +1 / -1 from the grader."""
    answer_mode: str = _f(
        "boxed", "where the answer is read: the last \\boxed{}, the last \"Answer:\" line, or either",
        registry="common.grading:ANSWER_MODES")
    scorer: str = _f("math_verify", "what decides the verdict (reward and validation): math_verify (the "
                     "answer mode's answer, math-verify) or math_dapo (the authors': the last \"Answer:\" "
                     "line of the last 300 characters, Minerva-normalised string equality; needs answer_mode "
                     "answer_line)", registry="common.grading:SCORERS")
    grader_workers: int = _f(2, "math-verify worker processes (0 = in-process)")
    grader_timeout_s: float = _f(5.0, "seconds one answer may take to grade before it counts as wrong")


@dataclass
class ScheduleConfig:
    """Steps, checkpoints, validation, and stopping for a requeue."""
    total_steps: int = _f(100, "RL steps of this run")
    save_every: int = _f(10, "checkpoint every N steps (and at the last step and at keep_steps)")
    validate_every: int = _f(5, "validate every N steps (0 = never)")
    keep_last: Optional[int] = _f(None, "retention: keep the N newest complete checkpoints (resumable "
                                        "states) plus the protected ones (keep_steps, keep_best_window's, "
                                        "πref's); older ones are deleted once a newer checkpoint is "
                                        "complete; null = keep all")
    keep_steps: list[int] = _f(factory=list, help="steps always saved and never deleted (θ*, a late start, "
                                                  "the steps evaluation needs; the experiment driver sets "
                                                  "them)")
    keep_best_window: int = _f(1, "never delete a checkpoint that may still be the argmax of the first "
                                  "validation benchmark smoothed over this many points (centred, as "
                                  "protocol.peak_selection_window); 0 = protect none")
    export_dtype: Literal["model", "float32", "bfloat16", "float16"] = _f(
        "model", "dtype of a checkpoint's Hugging Face export (what evaluation loads); model = model.dtype. "
                 "Another dtype keeps the float32 master weights only in the sharded state (sharded/)")
    state_every: Optional[int] = _f(
        None, "between the checkpoints, save the training state alone (fp32 masters, optimizer, πref's "
              "shards, RNG, data position: what a resume needs; no HF export) every N steps, asynchronously "
              "(copied into CPU memory at the step boundary, written by a background thread while the next "
              "step runs; armor.checkpoint.AsyncStateSaver), into <run>/state/step_NNNNNN (the newest only). "
              "A preemption, which gives a run only the cluster's grace before SIGKILL, then costs at most N "
              "steps instead of save_every; null = none")
    stop_signals: list[str] = _f(factory=lambda: ["SIGUSR2", "SIGTERM"],
                                 help="signals that ask the run to stop for a requeue (SLURM's time-limit "
                                      "warning, preemption): the step in flight finishes, is saved, and the "
                                      "process exits with 128 + the signal's number; [] = none")


@dataclass
class ValidationConfig:
    """Validation during training (avg@k)."""
    benchmarks: list[str] = _f(factory=list, help="registry names or NAME=path.jsonl")
    samples: int = _f(4, "k of avg@k")
    temperature: float = _f(1.0, "sampling temperature of validation")
    top_p: float = _f(0.7, "nucleus sampling threshold of validation")
    max_problems: Optional[int] = _f(None, "score only the first N problems of each set")
    at_start: bool = _f(True, "validate the initial weights (step 0 of this run)")


@dataclass
class LoggingConfig:
    """Experiment logging: every backend is fed the same metrics and validation rows."""
    backends: list[Literal["jsonl", "tensorboard", "wandb"]] = _f(
        factory=lambda: ["jsonl"],
        help="jsonl (metrics.jsonl / validation.jsonl, always on), tensorboard (event files under the run "
             "folder), wandb (Weights & Biases; needs `pip install wandb`); a resumed run continues the same "
             "TensorBoard folder and W&B run")
    tensorboard_dir: str = _f("", "TensorBoard root shared by runs: a run writes to "
                                  "<tensorboard_dir>/<name>; \"\" = <run folder>/tensorboard")
    wandb_project: str = _f("armor-repro", "W&B project")
    wandb_entity: str = _f("", "W&B entity (team or user); \"\" = your default entity")
    wandb_group: str = _f("", "W&B group; \"\" = the first part of `name` (the preset)")
    wandb_mode: Literal["online", "offline"] = _f("online", "online: stream to the W&B server; offline: "
                                                            "write under <run folder>/wandb (sync later with "
                                                            "`wandb sync`)")
    answer_modes: str = _f("", "\"module:function\" of a classifier (problem text, response text) -> the "
                               "name of the mode that produced the response, with a `modes` attribute "
                               "listing every name it returns (the toy presets name the world's); each step "
                               "then logs mode_<name> (share among its on-policy samples) and, with anchors, "
                               "anchor_mode_<name> (share among its kept anchors); logging only: no draw, no "
                               "weight changes (unless algo.anchor.filter=exclude_modes reads it to choose "
                               "anchors). \"\" = none")


@dataclass
class RunConfig:
    """One training run."""
    name: str = _f("run", "run name (progress bar, W&B run name); the driver uses <preset>/<arm>/seed<s>")
    seed: int = _f(0, "seed of the prompt order, sampling and initialisation")
    output_dir: str = _f("", "run folder; \"\" = runs/<name>")
    device: Literal["auto", "cpu", "cuda"] = _f("auto", "auto: cuda when available, else cpu")
    threads: Optional[int] = _f(None, "torch CPU threads (null = torch default)")
    step_offset: int = _f(0, "RL steps already behind model.path (θ*'s stage-1 step), for plots")
    model: ModelConfig = _f(factory=ModelConfig, help="policy weights")
    data: DataConfig = _f(factory=DataConfig, help="training prompts")
    rollout: RolloutConfig = _f(factory=RolloutConfig, help="sampling")
    lengths: LengthConfig = _f(factory=LengthConfig, help="lengths")
    batch: BatchConfig = _f(factory=BatchConfig, help="batch")
    algo: AlgoConfig = _f(factory=AlgoConfig, help="objective")
    optim: OptimConfig = _f(factory=OptimConfig, help="optimizer")
    reward: RewardConfig = _f(factory=RewardConfig, help="reward")
    schedule: ScheduleConfig = _f(factory=ScheduleConfig, help="schedule")
    validation: ValidationConfig = _f(factory=ValidationConfig, help="validation")
    logging: LoggingConfig = _f(factory=LoggingConfig, help="experiment logging")
    parallel: ParallelConfig = _f(factory=ParallelConfig, help="several ranks: FSDP2 data parallelism")
    compute: ComputeConfig = _f(factory=ComputeConfig, help="how the same functions are computed")
    foreign: dict[str, Any] = field(default_factory=dict, metadata={
        "foreign": True, "help": "the file's sections owned by other tools (FOREIGN_SECTIONS), verbatim; not "
                                 "trainer keys, never validated here"})

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir or f"runs/{self.name}")


# ------------------------------------------------------------------------------------ building from dicts
def _is_optional(tp) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return True, args[0]
    return False, tp


def _coerce(value: Any, tp, key: str) -> Any:
    optional, inner = _is_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{key}: must not be null")
    tp = inner
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_mapping(tp, value, key)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, bool) and ("on" if value else "off") in allowed:
            value = "on" if value else "off"       # YAML reads a bare off / on as a boolean
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not one of {list(allowed)}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, str) and typing.get_origin(item_tp) is Literal:   # "jsonl,tensorboard"
            value = [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and item_tp is not str:
            value = [value]
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
                try:
                    return float(value)
                except ValueError:
                    pass
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(float(value)):
            raise ConfigError(f"{key}: must be finite, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp} at {key}")


# keys a config no longer has -> what replaced them (a run folder's config.yaml written before keeps them)
RETIRED_KEYS = {"rollout.static_kv_cache": "compute.fast (auto: the static-KV decoder where it applies; off: "
                                           "HF's generate)"}


def from_mapping(cls, data: dict, prefix: str = ""):
    """A config dataclass from a mapping, typed field by field; unknown keys and bad values raise ConfigError
    naming the dotted key (prefix: the section's own key), a retired key (RETIRED_KEYS) with what replaced
    it. Fields marked "foreign" are not keys."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("foreign")}
    for k in data:
        if k not in names:
            full = f"{prefix}.{k}" if prefix else k
            if full in RETIRED_KEYS:
                raise ConfigError(f"{full}: retired, replaced by {RETIRED_KEYS[full]}; delete it (from a run "
                                  f"folder's config.yaml written before, then resume)")
            others = f"; sections of other tools: {', '.join(FOREIGN_SECTIONS)}" if cls is RunConfig else ""
            raise ConfigError(f"{full}: unknown key (known: {', '.join(sorted(names))}{others})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            full = f"{prefix}.{f.name}" if prefix else f.name
            kwargs[f.name] = _coerce(data[f.name], hints[f.name], full)
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`algo.mix.alpha=0.875` -> (["algo", "mix", "alpha"], 0.875); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. algo.mix.alpha=0.875")
    key, raw = text.split("=", 1)
    key = key.strip().lstrip("-")
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = dict(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for p in parts[:-1]:
            child = node.get(p)
            node[p] = dict(child) if isinstance(child, dict) else {}
            node = node[p]
        node[parts[-1]] = value
    return data


def split_foreign(data: dict) -> tuple[dict, dict]:
    """(the trainer's part of a config mapping, its FOREIGN_SECTIONS as given)."""
    own = {k: v for k, v in data.items() if k not in FOREIGN_SECTIONS}
    return own, {k: v for k, v in data.items() if k in FOREIGN_SECTIONS}


def from_dict(data: dict) -> RunConfig:
    """Build and validate the trainer's config; the foreign sections are kept aside, unvalidated."""
    own, foreign = split_foreign(data)
    cfg = from_mapping(RunConfig, own)
    cfg.foreign = foreign
    validate(cfg)
    return cfg


def export_dtype(cfg: RunConfig) -> str:
    """The dtype of a checkpoint's HF export: schedule.export_dtype, "model" meaning model.dtype."""
    e = cfg.schedule.export_dtype
    return cfg.model.dtype if e == "model" else e


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Load a YAML preset (or defaults when path is None), apply dotted overrides, validate."""
    data = read_yaml(path) if path else {}
    return from_dict(apply_overrides(data, overrides or []))


def to_dict(cfg: RunConfig) -> dict:
    """The config as a file holds it: the trainer's sections, then the foreign ones verbatim."""
    data = dataclasses.asdict(cfg)
    data.update(data.pop("foreign", None) or {})
    return data


def dump_config(cfg: RunConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


# ------------------------------------------------------------------------------------------ validation
def _check(cond: bool, key: str, value: Any, why: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {value!r} {why}")


def _registered_choices(cfg, prefix: str = ""):
    """(key, value, Registry) of every field whose choices a registry holds (metadata["registry"])."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            yield from _registered_choices(value, f"{prefix}{f.name}.")
        elif f.metadata.get("registry"):
            yield f"{prefix}{f.name}", value, registry_of(f.metadata["registry"])


def needs_reference_logprobs(cfg: RunConfig) -> bool:
    """Whether a step computes πref's log-probs (the one rule: the trainer, the memory estimate and the plan's
    time estimate read it): the KL penalty, a ratio that reads πref, the KL monitor, or a distillation from
    πref."""
    a = cfg.algo
    from armor.objectives import RATIOS
    return (a.kl.coef != 0.0 or "reference" in RATIOS[a.mix.variant].needs or a.reference.kl_monitor
            or (a.distill.mode != "none" and not a.distill.teacher_path))


def validate(cfg: RunConfig) -> None:
    """Semantic checks that types cannot express; each failure names the key and its value."""
    c = _check
    c(bool(cfg.name.strip()), "name", cfg.name, "must not be empty")
    c(cfg.seed >= 0, "seed", cfg.seed, "must be >= 0")
    c(cfg.threads is None or cfg.threads >= 1, "threads", cfg.threads, "must be >= 1")
    c(cfg.step_offset >= 0, "step_offset", cfg.step_offset, "must be >= 0")
    c(bool(cfg.model.path), "model.path", cfg.model.path, "is required (an HF model folder or hub id)")
    c(bool(cfg.data.train), "data.train", cfg.data.train, "is required (a .jsonl or .parquet file)")
    c(cfg.data.max_prompts is None or cfg.data.max_prompts >= 1, "data.max_prompts", cfg.data.max_prompts,
      "must be >= 1")

    r = cfg.rollout
    c(r.temperature > 0, "rollout.temperature", r.temperature, "must be > 0")
    c(0 < r.top_p <= 1, "rollout.top_p", r.top_p, "must be in (0, 1]")
    c(r.gen_batch_prompts >= 0, "rollout.gen_batch_prompts", r.gen_batch_prompts, "must be >= 0")
    c(r.max_rounds >= 1, "rollout.max_rounds", r.max_rounds, "must be >= 1")
    c(r.refill_margin is None or r.refill_margin >= 1, "rollout.refill_margin", r.refill_margin,
      "must be >= 1 (or null: full rounds)")
    c(0 < r.gpu_memory_utilization <= 1, "rollout.gpu_memory_utilization", r.gpu_memory_utilization,
      "must be in (0, 1]")
    c(r.tensor_parallel_size >= 1, "rollout.tensor_parallel_size", r.tensor_parallel_size, "must be >= 1")
    c(r.tensor_parallel_size == 1 or r.engine == "vllm", "rollout.tensor_parallel_size",
      r.tensor_parallel_size, "needs rollout.engine=vllm (the hf engine is one process)")
    c(r.shards is None or r.shards >= 1, "rollout.shards", r.shards, "must be >= 1")
    c(r.max_logprob_mismatch is None or r.max_logprob_mismatch > 0, "rollout.max_logprob_mismatch",
      r.max_logprob_mismatch, "must be > 0 (null: by the compute dtype)")
    c(r.max_steps_without_kept is None or r.max_steps_without_kept >= 1, "rollout.max_steps_without_kept",
      r.max_steps_without_kept, "must be >= 1 (or null: never stop)")
    # compute.fast=native where it cannot run (the device, the dtype, the engine); the compiler is looked for
    # where the run starts (armor.trainer: common.fast.choose, on the resolved device and rank count)
    fast = cfg.compute.fast
    c(fast != "native" or cfg.device != "cuda", "compute.fast", fast, "needs the CPU (device: cuda)")
    c(fast != "native" or cfg.model.dtype == "float32", "compute.fast", fast,
      f"needs model.dtype float32 (it is {cfg.model.dtype})")
    c(fast != "native" or r.engine == "hf", "compute.fast", fast,
      f"decodes in the hf engine only (rollout.engine is {r.engine})")
    c(cfg.parallel.timeout_s > 0, "parallel.timeout_s", cfg.parallel.timeout_s, "must be > 0")
    c(cfg.parallel.stall_steps >= 0, "parallel.stall_steps", cfg.parallel.stall_steps,
      "must be >= 0 (0 = off)")
    c(cfg.parallel.stall_min_s > 0, "parallel.stall_min_s", cfg.parallel.stall_min_s, "must be > 0")
    c(not (cfg.parallel.cpu_offload and cfg.device == "cpu"), "parallel.cpu_offload",
      cfg.parallel.cpu_offload,
      "offloads GPU parameters to the CPU: it needs device cuda (or auto on a GPU machine)")

    L = cfg.lengths
    c(L.max_prompt >= 1, "lengths.max_prompt", L.max_prompt, "must be >= 1")
    c(L.max_response >= 1, "lengths.max_response", L.max_response, "must be >= 1")
    c(0 <= L.overlong_buffer < L.max_response, "lengths.overlong_buffer", L.overlong_buffer,
      f"must be in [0, lengths.max_response={L.max_response})")
    c(L.overlong_factor >= 0, "lengths.overlong_factor", L.overlong_factor, "must be >= 0")

    b = cfg.batch
    c(b.prompts_per_step >= 1, "batch.prompts_per_step", b.prompts_per_step, "must be >= 1")
    c(b.group_size >= 2, "batch.group_size", b.group_size, "must be >= 2 (group advantages need a group)")
    c(b.mini_batch_prompts >= 1, "batch.mini_batch_prompts", b.mini_batch_prompts, "must be >= 1")
    c(b.prompts_per_step % b.mini_batch_prompts == 0, "batch.mini_batch_prompts", b.mini_batch_prompts,
      f"must divide batch.prompts_per_step={b.prompts_per_step}")
    c(b.epochs >= 1, "batch.epochs", b.epochs, "must be >= 1")
    c(b.micro_batch_responses >= 1, "batch.micro_batch_responses", b.micro_batch_responses, "must be >= 1")
    c(b.micro_batch_tokens is None or b.micro_batch_tokens >= L.max_prompt + L.max_response,
      "batch.micro_batch_tokens", b.micro_batch_tokens,
      f"must be >= lengths.max_prompt + lengths.max_response = {L.max_prompt + L.max_response} (the longest "
      "sequence must fit in one micro-batch)")
    c(b.logprob_chunk_tokens is None or b.logprob_chunk_tokens >= 1, "batch.logprob_chunk_tokens",
      b.logprob_chunk_tokens, "must be >= 1 (or null)")

    a = cfg.algo
    c(0 < a.qae_k < 1, "algo.qae_k", a.qae_k, "must be in (0, 1)")
    c(a.clip.eps_low >= 0, "algo.clip.eps_low", a.clip.eps_low, "must be >= 0")
    c(a.clip.eps_low < 1, "algo.clip.eps_low", a.clip.eps_low, "must be < 1 (the ratio's lower bound 1-ε)")
    c(a.clip.eps_high >= 0, "algo.clip.eps_high", a.clip.eps_high, "must be >= 0")
    c(a.clip.dual_clip_c is None or a.clip.dual_clip_c > 1, "algo.clip.dual_clip_c", a.clip.dual_clip_c,
      "must be > 1 (or null to disable)")
    c(a.kl.coef >= 0, "algo.kl.coef", a.kl.coef, "must be >= 0")
    c(not a.anchor.enabled or a.anchor.ref_n >= 1, "algo.anchor.ref_n", a.anchor.ref_n,
      "must be >= 1 when algo.anchor.enabled")
    c(0 < a.mix.alpha <= 1, "algo.mix.alpha", a.mix.alpha, "must be in (0, 1]")
    c(not a.anchor.exclude_modes or a.anchor.filter == "exclude_modes", "algo.anchor.exclude_modes",
      a.anchor.exclude_modes, f"is read by algo.anchor.filter=exclude_modes only (it is {a.anchor.filter})")
    c(a.anchor.filter != "exclude_modes" or bool(a.anchor.exclude_modes), "algo.anchor.exclude_modes",
      a.anchor.exclude_modes, "must name at least one mode for algo.anchor.filter=exclude_modes")
    # each registered choice must be registered, and what it declares it needs must be there (armor.registry)
    for key, value, reg in _registered_choices(cfg):
        c(value in reg, key, value, f"is not a registered {reg.kind} (registered: {', '.join(reg.names())})")
        needs = reg[value].needs
        c("anchors" not in needs or a.anchor.enabled, key, value,
          "needs algo.anchor.enabled=true (it acts on anchors)")
        c("modes" not in needs or bool(cfg.logging.answer_modes), key, value,
          "needs a mode classifier (logging.answer_modes)")
        c("teacher" not in needs or a.distill.mode != "none", key, value,
          "needs a teacher (algo.distill.mode)")
    rs = a.reference.reset
    c(rs.every is None or rs.every >= 1, "algo.reference.reset.every", rs.every, "must be >= 1 (or null)")
    c(rs.until_step is None or rs.until_step >= 1, "algo.reference.reset.until_step", rs.until_step,
      "must be >= 1 (or null)")
    c(rs.until_step is None or rs.every is not None, "algo.reference.reset.until_step", rs.until_step,
      "needs algo.reference.reset.every")
    c(a.distill.coef >= 0, "algo.distill.coef", a.distill.coef, "must be >= 0")
    c(not (a.distill.mode != "none" and a.anchor.enabled), "algo.distill.mode", a.distill.mode,
      "cannot be combined with algo.anchor.enabled")
    rc = a.rollout_correction
    c(rc.mode == "none" or rc.threshold is not None, "algo.rollout_correction.threshold", rc.threshold,
      f"is required by algo.rollout_correction.mode={rc.mode} (C > 1, e.g. 2)")
    c(rc.threshold is None or rc.threshold > 1, "algo.rollout_correction.threshold", rc.threshold,
      "must be > 1 (ρ = 1, no mismatch, is never truncated or masked)")
    c(rc.threshold is None or rc.mode != "none", "algo.rollout_correction.threshold", rc.threshold,
      "needs algo.rollout_correction.mode tis or mis (it is none)")
    c(rc.threshold_lower is None or rc.mode == "mis", "algo.rollout_correction.threshold_lower",
      rc.threshold_lower, f"applies to algo.rollout_correction.mode=mis only (it is {rc.mode})")
    c(rc.threshold_lower is None or 0 <= rc.threshold_lower < 1, "algo.rollout_correction.threshold_lower",
      rc.threshold_lower, "must be in [0, 1) (or null: 1/threshold)")
    c(rc.level == "token" or rc.mode != "none", "algo.rollout_correction.level", rc.level,
      "needs algo.rollout_correction.mode tis or mis (it is none)")

    o = cfg.optim
    c(o.lr > 0, "optim.lr", o.lr, "must be > 0")
    c(o.warmup_steps >= 0, "optim.warmup_steps", o.warmup_steps, "must be >= 0")
    c(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "must be >= 0")
    c(o.grad_clip > 0, "optim.grad_clip", o.grad_clip, "must be > 0")
    c(len(o.betas) == 2 and all(0 <= x < 1 for x in o.betas), "optim.betas", o.betas,
      "must be two numbers in [0, 1)")
    c(o.eps > 0, "optim.eps", o.eps, "must be > 0")

    g = cfg.reward
    c(g.scorer != "math_dapo" or g.answer_mode == "answer_line", "reward.answer_mode", g.answer_mode,
      "must be answer_line with reward.scorer math_dapo (it reads the last \"Answer:\" line)")
    c(g.grader_workers >= 0, "reward.grader_workers", g.grader_workers, "must be >= 0")
    c(g.grader_timeout_s > 0, "reward.grader_timeout_s", g.grader_timeout_s, "must be > 0")

    s = cfg.schedule
    c(s.total_steps >= 1, "schedule.total_steps", s.total_steps, "must be >= 1")
    c(s.save_every >= 1, "schedule.save_every", s.save_every, "must be >= 1")
    c(s.validate_every >= 0, "schedule.validate_every", s.validate_every, "must be >= 0 (0 = never)")
    c(s.state_every is None or s.state_every >= 1, "schedule.state_every", s.state_every,
      "must be >= 1 (or null: none)")
    c(s.keep_last is None or s.keep_last >= 1, "schedule.keep_last", s.keep_last, "must be >= 1 (or null)")
    c(s.keep_best_window >= 0, "schedule.keep_best_window", s.keep_best_window, "must be >= 0")
    for i, k in enumerate(s.keep_steps):
        c(k >= 1, f"schedule.keep_steps[{i}]", k, "must be >= 1 (a step of this run)")
    import signal as _signal
    for i, name in enumerate(s.stop_signals):
        c(isinstance(getattr(_signal, str(name), None), _signal.Signals)
          and str(name) not in ("SIGKILL", "SIGSTOP"),
          f"schedule.stop_signals[{i}]", name, "must name a catchable signal, e.g. SIGUSR2 or SIGTERM")

    v = cfg.validation
    c(v.samples >= 1, "validation.samples", v.samples, "must be >= 1")
    c(v.temperature > 0, "validation.temperature", v.temperature, "must be > 0")
    c(0 < v.top_p <= 1, "validation.top_p", v.top_p, "must be in (0, 1]")
    c(v.max_problems is None or v.max_problems >= 1, "validation.max_problems", v.max_problems,
      "must be >= 1")
    c(not (s.validate_every > 0 and not v.benchmarks), "validation.benchmarks", v.benchmarks,
      "must name at least one set when schedule.validate_every > 0")

    lg = cfg.logging
    dup = sorted({x for x in lg.backends if lg.backends.count(x) > 1})
    c(not dup, "logging.backends", lg.backends, f"names {dup} more than once")
    if lg.answer_modes:
        from armor.step_state import mode_classifier
        try:
            mode_classifier(lg.answer_modes)
        except (ImportError, AttributeError, ValueError) as e:
            raise ConfigError(f"logging.answer_modes: {lg.answer_modes!r} {e}") from None
        modes = mode_classifier(lg.answer_modes).modes
        for i, m in enumerate(a.anchor.exclude_modes):
            c(m in modes, f"algo.anchor.exclude_modes[{i}]", m,
              f"is not a mode of {lg.answer_modes} (its modes: {', '.join(modes)})")

"""A plan sized in hours, GPU-hours and disk, and the plan-time checks of a GPU preset's job shape.

    t = throughput(preset)                          # the expected assumption (or a pilot's measurement)
    est = estimate_jobs(preset, jobs, t)            # key -> Estimate (hours, GPUs, checkpoint bytes)
    print("\\n".join(summary_lines(preset, jobs, est, t, cluster_nodes=16)))

Every figure rests on a named throughput (`Throughput`): assumed (the defaults below, the protocol's keys, the
driver's flags, a `bench.gpu_check` report), as a low / expected / high range (`scenarios`), or measured by
the pilot (`python reproduce/run_all.py --pilot`: runs/<preset>/pilot/pilot.json, `Measured`). The step model:

  a generation call      = tokens / (R x GPUs) + tail; tail = (max_response − mean response) / D: the call
                           waits for its longest response, decoded alone at the end (D tokens/s: one sequence)
  on-policy tokens       = drawn prompts x (|G| − 1 with anchors, else |G|) x fill x max_response
  reference tokens       = anchor share x drawn prompts x ref_n x fill x max_response (ARMOR's lazy anchors:
                           the reference samples only prompts that pass, about 1.5 B of them; the paper's
                           "about 125 %" of the baseline's inference is every drawn prompt, share 1)
  trained tokens         = prompts_per_step x |G| x fill x (max_prompt + max_response) x epochs
                           x (1 + 1/4 per extra forward pass: old policy, πref, teacher)
  a step                 = its generation calls (one round; a second call for the anchors' reference samples)
                           + trained / (U x GPUs) + pushes x push_s (the policy after each update; with
                           anchors the reference in and out: 2)
  a train job            = trained steps x step + validations x (validation tokens / (R x GPUs) + tail)
                           + saves x save_s; a branch trains only the steps after its branch point
  an evaluate job        = checkpoints x Σ benchmarks ceil(chunks / GPUs) x (a chunk's problems x k x fill
                           x max_response / R + tail): a chunk (EVAL_CHUNK_PROBLEMS problems) is one rank's
                           generation call, so a benchmark of fewer chunks than GPUs leaves some idle; past
                           its time limit the job is requeued and resumes (its attempts named)
  a preemption costs     = schedule.state_every (else save_every) completed steps + the one in flight

R, U: generated and trained tokens/s per GPU; fill: mean response length / lengths.max_response, by default
from the paper's reported lengths (protocol.paper_response_tokens, its source named) or an assumed range.
Measured by the pilot, a step is the pilot's own (its batch is the paper's divided by the nodes, so each GPU
does a full-scale step's work), and saves, validations and evaluations take its measured seconds. Checkpoint
volume: `checkpoint_volume` (the one formula; πref's shards in a run that resets it); host memory:
`host_memory_gb` (the engine's weight backup, a step's rollouts at the range's high end, a state save's CPU
copy). The graph's cost and the budget's choice of items: reproduce/dag/budget.py.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from common.jsonl import read_json

GiB = 2 ** 30
PEAK_TFLOPS = 989.0             # H100/H200 dense bf16, the GPU check's reference (bench/gpu_check.py)
DEFAULT_ROLLOUT_TPS = 2500.0    # generated tokens/s per GPU (vLLM, colocated, 7-8B, bf16): assumed
DEFAULT_UPDATE_MFU = 0.30       # model FLOPs utilisation of the update: assumed
DEFAULT_SAVE_S = 300.0          # seconds per checkpoint save: assumed
# one sequence decoded alone (the tail of a generation call), 7-8B bf16 on an H100-class GPU: assumed range
DECODE_TPS = {"low": 150.0, "expected": 100.0, "high": 60.0}
# seconds to push the weights into the engine (a full-tensor gather + load_weights): assumed range
PUSH_S = {"low": 5.0, "expected": 10.0, "high": 30.0}
# mean response / max_response without a paper length for the model: assumed range
ASSUMED_FILL = {"low": 0.1, "expected": 0.25, "high": 0.5}
# the high end of a paper-length fill: lengths may grow in stage 2 (an allowance, no source)
PAPER_FILL_HIGH_FACTOR = 2.0
ANCHOR_CHUNK_MARGIN = 1.5       # armor.trainer's: the reference samples ~1.5 x the prompts still needed
CPU_JOB_H = {"stage": 1.0, "world": 0.1, "select_peak": 0.05, "collect": 0.1, "figures": 0.1}
# problems of the published sets (the eval registry's benchmarks); others count as UNKNOWN_PROBLEMS
PROBLEMS = {"aime24": 30, "aime25": 30, "amc": 83, "amc23": 40, "math500": 500, "minerva": 272,
            "olympiadbench": 675, "gpqa_diamond": 198, "mmlu_pro": 12032, "mmlu_pro_sample300": 300}
UNKNOWN_PROBLEMS = 500
# host memory of one rank beside vLLM's weight backup: the Python process, torch, CUDA's host side, the data
HOST_RANK_OVERHEAD_GB = 8.0
PILOT_DIR, PILOT_FILE = "pilot", "pilot.json"   # runs/<preset>/pilot/pilot.json: what the pilot measured
# host bytes per generated token a rank holds while a step's rollouts are in memory (every rank gathers every
# shard's, armor/spmd.py sharded_map): the token id in a Python list (36 B) and its float32 engine log-prob
# (armor.step_state.engine_logprobs), measured with tracemalloc after a pickle round trip: 44 B
ROLLOUT_BYTES_PER_TOKEN = 44
EVAL_CHUNK_PROBLEMS = 32        # eval.settings.EvalSettings.chunk_size: a chunk is generated by one rank


class PlanError(ValueError):
    pass


@dataclass
class Measured:
    """What the pilot measured (runs/<preset>/pilot/pilot.json, written by reproduce/jobs/pilot.py): seconds
    of a DAPO step and of an ARMOR step at full-scale per-GPU load, of a save, a push, a validation sample
    and an evaluation sample (the slice: one chunk a benchmark, so one rank's), and the lengths they ran
    at."""
    path: str
    dapo_step_s: float
    armor_step_s: float
    reference_logprob_s: float      # an ARMOR step's log-prob phase minus DAPO's: πref's forward
    save_s: float
    push_s: float
    validation_sample_s: float      # seconds per validation sample, on the pilot's ranks
    eval_sample_s: Optional[float]  # seconds per evaluation sample of one rank (the slice's chunks)
    response_tokens: float          # the pilot's mean response length
    anchor_share: Optional[float]
    nodes: int
    gpus: int
    when: str = ""

    def describe(self) -> str:
        ev = f", evaluation {self.eval_sample_s:.3g} s a sample" if self.eval_sample_s else ""
        share = f", anchor share {self.anchor_share:.2f}" if self.anchor_share is not None else ""
        return (f"measured by the pilot ({self.path}{', ' + self.when if self.when else ''}; {self.nodes} "
                f"node(s), {self.gpus} GPU(s), at the paper's per-GPU load): DAPO step "
                f"{self.dapo_step_s:,.1f} s, ARMOR step {self.armor_step_s:,.1f} s, save "
                f"{self.save_s:,.1f} s, "
                f"push {self.push_s:,.2f} s, validation {self.validation_sample_s:.3g} s a sample{ev}; "
                f"responses {self.response_tokens:,.0f} tokens on average{share}")


def read_pilot(path: str | Path) -> Optional[Measured]:
    """The pilot's measurements, or None when there are none (no file, or a pilot that did not finish)."""
    d = read_json(Path(path))
    if not isinstance(d, dict) or not d.get("complete"):
        return None
    try:
        return Measured(path=str(path), dapo_step_s=float(d["dapo"]["step_s"]),
                        armor_step_s=float(d["armor"]["step_s"]),
                        reference_logprob_s=max(0.0, float(d["armor"]["logprob_s"])
                                                - float(d["dapo"]["logprob_s"])),
                        save_s=float(d["save_s"]), push_s=float(d["push_s"]),
                        validation_sample_s=float(d["validation_sample_s"]),
                        eval_sample_s=(float(d["eval"]["sample_s"]) if (d.get("eval") or {}).get("sample_s")
                                       else None),
                        response_tokens=float(d["dapo"]["response_tokens"]),
                        anchor_share=d["armor"].get("anchor_share"), nodes=int(d["nodes"]),
                        gpus=int(d["gpus"]), when=str(d.get("when", "")))
    except (KeyError, TypeError, ValueError) as e:
        raise PlanError(f"{path}: not a complete pilot report ({e!r}); rerun --pilot") from None


@dataclass
class Throughput:
    """The assumption every hour in a plan rests on (named in its output)."""
    rollout_tokens_per_s: float = DEFAULT_ROLLOUT_TPS
    update_tokens_per_s: Optional[float] = None     # None: from update_mfu and the model's FLOPs per token
    update_mfu: float = DEFAULT_UPDATE_MFU
    fill: float = ASSUMED_FILL["expected"]
    save_s: float = DEFAULT_SAVE_S
    decode_tokens_per_s: float = DECODE_TPS["expected"]
    push_s: float = PUSH_S["expected"]
    anchor_share: Optional[float] = None            # None: the lazy anchors' 1.5 B / drawn prompts
    source: str = "assumed (reproduce/sizing.py defaults), not measured"
    fill_source: str = "assumed"
    label: str = "expected"
    fixed: frozenset = frozenset()                  # knobs a flag, key or report set (not ranged)
    measured: Optional[Measured] = None

    def update_tps(self, n_params: Optional[int]) -> float:
        """U: trained tokens/s per GPU; from the MFU at 8 N FLOPs per token (forward 2N, backward 4N,
        recomputation 2N) when no figure is given."""
        if self.update_tokens_per_s:
            return self.update_tokens_per_s
        return self.update_mfu * PEAK_TFLOPS * 1e12 / (8 * (n_params or 7e9))

    def share(self, cfg) -> float:
        """The anchor share: the fraction of a round's drawn prompts whose reference samples are drawn."""
        if self.anchor_share is not None:
            return self.anchor_share
        b = cfg.batch.prompts_per_step
        drawn = cfg.rollout.gen_batch_prompts or b
        margin = 1.0 if self.label == "low" else ANCHOR_CHUNK_MARGIN   # low: every reference call keeps
        return min(1.0, margin * b / drawn)

    def describe(self, n_params: Optional[int]) -> str:
        if self.measured is not None:
            return "throughput: " + self.measured.describe()
        u = (f"update {self.update_tps(n_params):,.0f} trained tok/s/GPU" if self.update_tokens_per_s else
             f"update {self.update_tps(n_params):,.0f} trained tok/s/GPU (MFU {self.update_mfu:g} of "
             f"{PEAK_TFLOPS:g} TFLOP/s at 8·N FLOPs/token)")
        share = ("lazy anchors' 1.5 B of the drawn prompts" if self.anchor_share is None
                 else f"{self.anchor_share:g} of the drawn prompts")
        return (f"throughput ({self.label}): rollout {self.rollout_tokens_per_s:,.0f} generated tok/s/GPU, "
                f"{u}, responses {self.fill:.3g} of max_response on average ({self.fill_source}), a call's "
                f"tail decoded alone at {self.decode_tokens_per_s:g} tok/s, {self.push_s:g} s a push, "
                f"reference samples for the {share}, {self.save_s:g} s per save [{self.source}]")


def fill_range(preset) -> tuple[dict[str, float], str]:
    """{low, expected, high} response fill of the preset's model and where it comes from: the paper's
    reported lengths (protocol.paper_response_tokens over lengths.max_response: the longer one expected, the
    high end PAPER_FILL_HIGH_FACTOR x it), else ASSUMED_FILL."""
    p, L = preset.protocol, preset.cfg.lengths.max_response
    if p.paper_response_tokens:
        lo, hi = (float(x) / L for x in p.paper_response_tokens)
        src = (f"the paper's {p.paper_response_tokens[0]:g}-{p.paper_response_tokens[1]:g} tokens of "
               f"{L} ({p.paper_response_source or 'protocol.paper_response_tokens'}); high: "
               f"{PAPER_FILL_HIGH_FACTOR:g} x, an allowance")
        return {"low": lo, "expected": hi, "high": min(1.0, PAPER_FILL_HIGH_FACTOR * hi)}, src
    return dict(ASSUMED_FILL), "assumed: the paper reports no length for this model"


def throughput(preset, rollout_tps: Optional[float] = None, update_tps: Optional[float] = None,
               fill: Optional[float] = None, save_s: Optional[float] = None,
               gpu_check: Optional[str | Path] = None, decode_tps: Optional[float] = None,
               push_s: Optional[float] = None, anchor_share: Optional[float] = None,
               pilot: Optional[Measured] = None) -> Throughput:
    """The plan's expected throughput: defaults < the preset's protocol keys < a bench.gpu_check report <
    flags; a pilot's measurement replaces the step, save, push and evaluation figures."""
    p = preset.protocol
    fills, fill_src = fill_range(preset)
    t = Throughput(fill=fills["expected"], fill_source=fill_src)
    src, fixed = [], set()
    for name, attr in (("rollout_tokens_per_s", "rollout_tokens_per_s"),
                       ("update_tokens_per_s", "update_tokens_per_s"), ("response_fill", "fill"),
                       ("save_s", "save_s")):
        v = getattr(p, name, None)
        if v is not None:
            setattr(t, attr, float(v))
            src.append(f"protocol.{name}")
            fixed.add(attr)
    if gpu_check:
        got = from_gpu_check(gpu_check, _n_params(preset))
        for k, v in got.items():
            setattr(t, k, v)
        fixed |= set(got)
        src.append(f"{gpu_check}: {', '.join(got) or 'no usable figure'}")
    for attr, v, flag in (("rollout_tokens_per_s", rollout_tps, "--rollout-tokens-per-s"),
                          ("update_tokens_per_s", update_tps, "--update-tokens-per-s"),
                          ("fill", fill, "--response-fill"), ("save_s", save_s, "--save-s"),
                          ("decode_tokens_per_s", decode_tps, "--decode-tokens-per-s"),
                          ("push_s", push_s, "--push-s"), ("anchor_share", anchor_share, "--anchor-share")):
        if v is not None:
            setattr(t, attr, float(v))
            src.append(flag)
            fixed.add(attr)
    if "fill" in fixed:
        t.fill_source = "given"
    for attr, ok, why in (("rollout_tokens_per_s", t.rollout_tokens_per_s > 0, "must be > 0"),
                          ("save_s", t.save_s >= 0, "must be >= 0"),
                          ("update_tokens_per_s", t.update_tokens_per_s is None or t.update_tokens_per_s > 0,
                           "must be > 0"),
                          ("response_fill", 0 < t.fill <= 1, "must be in (0, 1]"),
                          ("decode_tokens_per_s", t.decode_tokens_per_s > 0, "must be > 0"),
                          ("push_s", t.push_s >= 0, "must be >= 0"),
                          ("anchor_share", t.anchor_share is None or 0 < t.anchor_share <= 1,
                           "must be in (0, 1]")):
        if not ok:
            value = getattr(t, "fill" if attr == "response_fill" else attr)
            raise PlanError(f"throughput {attr}: {value!r} {why}")
    if src:
        t.source = "from " + "; ".join(src) + "; the rest assumed (reproduce/sizing.py defaults)"
    t.fixed = frozenset(fixed)
    if pilot is not None:
        t.measured = pilot
        t.source = pilot.describe()
        t.label = "measured"
    return t


def scenarios(preset, t: Throughput) -> list[Throughput]:
    """[low, expected, high]: the assumption's range, each knob no flag, key or report fixed at its low /
    high end (fill, the tail's decode speed, the push, the anchor share); [t] when the pilot measured."""
    if t.measured is not None:
        return [t]
    fills, _ = fill_range(preset)
    out = []
    for label in ("low", "expected", "high"):
        if label == "expected":
            out.append(t)
            continue
        ch = {"label": label}
        if "fill" not in t.fixed:
            ch["fill"] = fills[label]
        if "decode_tokens_per_s" not in t.fixed:
            ch["decode_tokens_per_s"] = DECODE_TPS[label]
        if "push_s" not in t.fixed:
            ch["push_s"] = PUSH_S[label]
        if "anchor_share" not in t.fixed:
            ch["anchor_share"] = None if label == "low" else 1.0
        out.append(dataclasses.replace(t, **ch))
    return out


def from_gpu_check(path: str | Path, n_params: Optional[int]) -> dict:
    """The figures of a `python -m bench.gpu_check` report that transfer to the full model: the update's MFU
    (its TFLOP/s over the 989 TFLOP/s reference) and the engine's generated tokens/s scaled by the checked
    model's parameters over the preset's (decoding is bound by reading the weights)."""
    rep = read_json(Path(path))
    if not isinstance(rep, dict):
        raise PlanError(f"--gpu-check {path}: not a gpu_check.json report")
    out = {}
    upd = (rep.get("phases") or {}).get("update") or {}
    if upd.get("mfu"):
        out["update_mfu"] = float(upd["mfu"])
    gen = (rep.get("vllm") or {}).get("vllm_generate_tokens_per_s")
    checked = (rep.get("model") or {}).get("params")
    if gen and checked and n_params:
        out["rollout_tokens_per_s"] = float(gen) * float(checked) / float(n_params)
    return out


def _n_params(preset) -> Optional[int]:
    from armor import memory
    shape = memory.model_shape(preset.cfg.model.path)
    return shape.params if shape else None


def _export_bytes(cfg) -> int:
    """Bytes per parameter of a checkpoint's HF export (armor.config.export_dtype)."""
    from armor import memory
    from armor.config import export_dtype
    return memory.BYTES[export_dtype(cfg)]


# ------------------------------------------------------------------------------------------- memory, disk
def checkpoint_volume(n_params: int, saves: int, keep_last: Optional[int] = None, protected: int = 0,
                      export_bytes: int = 2, master_bytes: int = 4, optimizer_bytes: int = 8,
                      reference_bytes: int = 0) -> dict:
    """Bytes on disk of one run's checkpoints under the retention policy: each save holds the HF export in the
    published dtype (bf16: 2 N), the sharded fp32 masters (4 N), AdamW's two moments (8 N) and, in a run
    that resets πref, πref's shards in the compute dtype (bf16: 2 N; armor.checkpoint.save_sharded_state);
    the run keeps its last `keep_last` resumable states (schedule.keep_last; None: every save) plus its
    `protected` steps (θ*, late start, keep_steps, the best validation, the step πref holds), counted as full
    saves (an upper bound)."""
    per_save = n_params * (export_bytes + master_bytes + optimizer_bytes + reference_bytes)
    kept = saves if keep_last is None else min(saves, keep_last + protected)
    return {"per_save": per_save, "saves": saves, "kept": kept, "bytes": kept * per_save}


def host_memory_gb(n_params: int, ranks_per_node: int, nodes: int = 1, engine: str = "vllm",
                   grader_workers: int = 0, export_bytes: int = 2, rollout_tokens: float = 0.0,
                   state_staging: bool = False) -> float:
    """Host memory one training node needs (GB, 1e9 bytes): per rank vLLM's sleep-mode weight backup in
    pinned memory (bf16: 2 N), HOST_RANK_OVERHEAD_GB, 0.5 GB per grader worker, the step's rollouts
    (`rollout_tokens` generated tokens, all shards' on every rank, ROLLOUT_BYTES_PER_TOKEN each) and, with
    schedule.state_every (`state_staging`), the CPU copy of its shards a background state save writes
    (masters 4N + AdamW 8N + πref 2N, over all ranks); and the node's share of the HF export its ranks hold
    on CPU while they write their parts (armor.checkpoint.export_parts: the parts are even in bytes over all
    ranks, so export_bytes N / nodes)."""
    backup = 2 * n_params / 1e9 if engine == "vllm" else 0.0
    staged = 14 * n_params / 1e9 / (ranks_per_node * nodes) if state_staging else 0.0
    per_rank = (backup + HOST_RANK_OVERHEAD_GB + 0.5 * grader_workers
                + rollout_tokens * ROLLOUT_BYTES_PER_TOKEN / 1e9 + staged)
    return ranks_per_node * per_rank + export_bytes * n_params / 1e9 / nodes


def rollout_tokens(cfg, t: Optional["Throughput"] = None) -> float:
    """Generated tokens of one step a rank holds: its on-policy and reference samples (step_tokens' first
    two terms, at `t`; default: the assumed expected throughput)."""
    on, ref, _ = step_tokens(cfg, t or Throughput())
    return on + ref


def default_host_memory(preset) -> dict[str, float]:
    """{kind: GB} a GPU preset's train and evaluate jobs request per node (rounded up to 10 GB)."""
    p = preset.protocol
    n = _n_params(preset)
    if not p.gpus_per_node or n is None:
        return {}
    ranks = p.procs_per_node or p.gpus_per_node
    cfg = preset.cfg
    train = host_memory_gb(n, ranks, p.nodes, cfg.rollout.engine, cfg.reward.grader_workers,
                           _export_bytes(cfg), _max_rollout_tokens(preset), bool(cfg.schedule.state_every))
    evaluate = p.gpus_per_node * (2 * n / 1e9 + HOST_RANK_OVERHEAD_GB)
    return {"train": 10 * math.ceil(train / 10), "evaluate": 10 * math.ceil(evaluate / 10)}


def _max_rollout_tokens(preset) -> float:
    """The most generated tokens a step of any arm holds (anchors add πref's samples), at the high end of
    the plan's range (`scenarios`: the longer responses, reference samples for every drawn prompt): a
    memory request covers the long steps, not the expected ones."""
    from reproduce.matrix.arms import build_arms
    high = scenarios(preset, throughput(preset))[-1]
    cfgs = [preset.cfg] + [_config(str(preset.path), tuple(a.overrides)) for a in build_arms(preset).values()
                           if not a.alias_of and a.overrides]
    return max(rollout_tokens(c, high) for c in cfgs)


# ------------------------------------------------------------------------------------------- estimates
@dataclass
class Estimate:
    hours: float
    gpus: int = 0
    nodes: int = 0                 # whole nodes the job holds (0: a CPU job beside the others)
    ckpt_bytes: int = 0
    detail: str = ""
    watch: Optional[tuple[str, float]] = None   # (job, fraction): ends when that job is this far through
    scratch_hours: Optional[float] = None       # a branch: its hours had it run from its start

    @property
    def gpu_hours(self) -> float:
        return self.hours * self.gpus

    @property
    def saved_gpu_hours(self) -> float:
        return 0.0 if self.scratch_hours is None else (self.scratch_hours - self.hours) * self.gpus


def _bench_name(b: str) -> str:
    return b.split("=", 1)[0]


@functools.lru_cache(maxsize=None)
def _config(path: str, overrides: tuple):
    from armor.config import load_config
    return load_config(path, list(overrides))


def _needs_reference(cfg) -> int:
    """Extra forward passes of an update besides the old policy's: πref's (the trainer's rule,
    armor.config.needs_reference_logprobs) and a separate teacher's."""
    from armor.config import needs_reference_logprobs
    a = cfg.algo
    return int(needs_reference_logprobs(cfg)) + int(a.distill.mode != "none" and bool(a.distill.teacher_path))


def step_tokens(cfg, t: Throughput) -> tuple[float, float, float]:
    """(on-policy generated, reference generated, trained) tokens of one step (the module's formulas)."""
    b, L, r = cfg.batch, cfg.lengths, cfg.rollout
    resp = t.fill * L.max_response
    drawn = r.gen_batch_prompts or b.prompts_per_step
    anchors = cfg.algo.anchor.enabled
    on = drawn * (b.group_size - 1 if anchors else b.group_size) * resp
    ref = t.share(cfg) * drawn * cfg.algo.anchor.ref_n * resp if anchors else 0.0
    trained = b.prompts_per_step * b.group_size * t.fill * (L.max_prompt + L.max_response) * b.epochs
    return on, ref, trained * (1 + 0.25 * (1 + _needs_reference(cfg)))


def tail_seconds(cfg, t: Throughput) -> float:
    """One generation call's tail: its longest response (max_response) decoded alone after the mean one."""
    L = cfg.lengths.max_response
    return max(0.0, L - t.fill * L) / t.decode_tokens_per_s


def step_parts(cfg, t: Throughput, gpus: int, n_params: Optional[int]) -> dict[str, float]:
    """Seconds of one training step on `gpus` GPUs by part: generate (tokens and tails), update, push; a
    pilot's measurement gives the step whole (DAPO's, ARMOR's with anchors, DAPO's plus πref's forward for
    an arm that reads πref without anchors)."""
    m = t.measured
    if m is not None:
        if cfg.algo.anchor.enabled:
            return {"step": m.armor_step_s}
        from armor.config import needs_reference_logprobs
        return {"step": m.dapo_step_s + (m.reference_logprob_s if needs_reference_logprobs(cfg) else 0.0)}
    on, ref, trained = step_tokens(cfg, t)
    g = max(1, gpus)
    anchors = cfg.algo.anchor.enabled
    gen = (on + ref) / (t.rollout_tokens_per_s * g) + (2 if anchors else 1) * tail_seconds(cfg, t)
    return {"generate": gen, "update": trained / (t.update_tps(n_params) * g),
            "push": (2 if anchors else 1) * t.push_s}


def train_step_seconds(cfg, t: Throughput, gpus: int, n_params: Optional[int]) -> float:
    """Expected seconds of one training step and a save on `gpus` GPUs (train_estimate's per-step terms)."""
    return sum(step_parts(cfg, t, gpus, n_params).values()) + (t.measured.save_s if t.measured else t.save_s)


def validation_seconds(cfg, t: Throughput, gpus: int) -> float:
    """One validation: its samples' tokens and a tail per benchmark, or the pilot's seconds per sample."""
    v = cfg.validation
    samples = sum(min(PROBLEMS.get(_bench_name(x), UNKNOWN_PROBLEMS), v.max_problems or 10 ** 9)
                  for x in v.benchmarks) * v.samples
    if t.measured is not None:
        return samples * t.measured.validation_sample_s * max(1, t.measured.gpus) / max(1, gpus)
    return (samples * t.fill * cfg.lengths.max_response / (t.rollout_tokens_per_s * max(1, gpus))
            + len(v.benchmarks) * tail_seconds(cfg, t))


def _job_config(preset, job):
    ov = tuple(job.info.get("arm_overrides", []))
    p = preset.protocol
    if int(job.info.get("stage", 1)) == 2:
        ov = tuple(p.stage2_overrides) + ((f"schedule.validate_every={p.stage2_validate_every}",)
                                          if p.stage2_validate_every else ()) + ov
    return _config(str(preset.path), ov)


def train_estimate(preset, job, t: Throughput, n_params: Optional[int]) -> Estimate:
    """A train job's hours: the steps it trains (after its branch point), their validations and saves."""
    res = job.resources
    gpus = res.nodes * res.gpus_per_node
    cfg = _job_config(preset, job)
    steps = int(job.info.get("steps") or cfg.schedule.total_steps)
    first = int(job.info.get("trained_from") or 0)
    s = cfg.schedule
    per_step = sum(step_parts(cfg, t, gpus, n_params).values())
    val_s = validation_seconds(cfg, t, gpus)
    save_s = t.measured.save_s if t.measured else t.save_s

    def hours(a: int, b: int) -> tuple[float, int, int]:     # steps a+1..b: seconds, validations, saves
        vals = (b // s.validate_every - a // s.validate_every) if s.validate_every else 0
        vals += 1 if a == 0 and s.validate_every and cfg.validation.at_start else 0
        saves = math.ceil(b / s.save_every) - math.ceil(a / s.save_every) if b > a else 0
        return ((b - a) * per_step + vals * val_s + saves * save_s) / 3600, vals, saves

    h, vals, saves = hours(first, steps)
    vol = 0
    if n_params:
        vol = checkpoint_volume(n_params, math.ceil(steps / s.save_every), s.keep_last,
                                _n_protected(cfg, job), reference_bytes=_reference_bytes(cfg))["bytes"]
    on, ref, trained = step_tokens(cfg, t)
    what = (f"{steps - first} of {steps} steps (from {job.info['branch']['source']}'s step {first})"
            if first else f"{steps} steps")
    tokens = "" if t.measured else (f" x ({(on + ref) / 1e6:.0f}M generated + {trained / 1e6:.0f}M trained "
                                    f"tokens)")
    detail = (f"{what}{tokens}, {vals} validations, {saves} saves (kept: "
              f"{_kept(cfg, math.ceil(steps / s.save_every), job)})")
    scratch = hours(0, steps if job.info.get("branch", {}).get("kind") != "continuation" else
                    steps - int(job.info.get("start_step") or 0))[0] if job.info.get("branch") else None
    return Estimate(h, gpus, res.nodes if gpus else 0, vol, detail, scratch_hours=scratch)


def _resets(cfg) -> bool:
    return cfg.algo.reference.reset.every is not None


def _reference_bytes(cfg) -> int:
    """Bytes per parameter of πref's shards in a save of a run that resets it (its compute dtype)."""
    from armor import memory
    return memory.BYTES[cfg.parallel.compute_dtype] if _resets(cfg) else 0


def _n_protected(cfg, job) -> int:
    """Checkpoints kept besides the last keep_last: θ* / late start (stage 1), the keep_steps the driver
    sets (the steps evaluation reads), the best validation, and the step whose policy πref holds."""
    steps = set(job.info.get("protected_steps", [])) | set(_overridden(job, "schedule.keep_steps") or [])
    return len(steps) + 1 + int(_resets(cfg))


def _overridden(job, key: str):
    """The value of `key=...` in the train job's resolved overrides (info["overrides"]), or None."""
    import yaml
    for tok in str(job.info.get("overrides", "")).split():
        if tok.startswith(key + "="):
            return yaml.safe_load(tok.split("=", 1)[1])
    return None


def _kept(cfg, saves: int, job) -> str:
    k = cfg.schedule.keep_last
    return f"all {saves}" if k is None else f"last {k} + {_n_protected(cfg, job)} protected"


def eval_checkpoints(preset, stage: int, steps: int) -> int:
    """Checkpoints an arm's evaluation reads (reproduce/jobs/evaluate.py eval_steps): θ* for a baseline; the
    best by validation, every eval_every-th, the table step and the last for a stage-2 arm."""
    if stage == 1:
        return 1
    saves = math.ceil(steps / preset.cfg.schedule.save_every)
    n = preset.protocol.eval_every
    return min(saves, 3 + (math.ceil(saves / n) if n else 0))


def eval_estimate(preset, job, t: Throughput) -> Estimate:
    """One arm's evaluation: each benchmark's chunks (EVAL_CHUNK_PROBLEMS problems, one rank's generation
    call each; eval.evaluate: rank r draws chunks r, r + N, ...) go round the GPUs, so a benchmark takes
    ceil(chunks / GPUs) chunk times, each its tokens / R and a tail, and one of fewer chunks than GPUs
    leaves the others idle. Measured, a chunk time is its samples x the pilot's seconds per sample (its
    slice, EVAL_PROBLEMS problems a benchmark, is one chunk each: one rank's). A job past its time limit is
    requeued and resumes (eval.evaluate keeps finished chunks): the detail names its attempts."""
    from eval.protocols import get_protocol
    res = job.resources
    gpus = res.nodes * res.gpus_per_node
    g = max(1, gpus)
    proto = get_protocol(preset.protocol.eval_protocol)
    max_new = proto.max_new_tokens or preset.cfg.lengths.max_response
    tokens, samples, wall_samples, rounds = 0.0, 0, 0, 0
    few = []
    for b in preset.protocol.eval_benchmarks:
        name = _bench_name(b)
        k = preset.protocol.eval_samples or proto.setting(name).samples
        n = PROBLEMS.get(name, UNKNOWN_PROBLEMS)
        if preset.protocol.eval_limit:
            n = min(n, preset.protocol.eval_limit)
        chunks = math.ceil(n / EVAL_CHUNK_PROBLEMS)
        tokens += n * k * t.fill * max_new
        samples += n * k
        wall_samples += math.ceil(chunks / g) * min(n, EVAL_CHUNK_PROBLEMS) * k
        rounds += math.ceil(chunks / g)
        if chunks < g:
            few.append(f"{name} {chunks}")
    ck = eval_checkpoints(preset, int(job.info.get("stage", 2)), int(job.info.get("steps") or 0))
    if t.measured is not None and t.measured.eval_sample_s:
        sec = ck * wall_samples * t.measured.eval_sample_s
        detail = f"{ck} checkpoint(s) x {samples:,} samples at the pilot's seconds per sample"
    else:
        tail = max(0.0, max_new - t.fill * max_new) / t.decode_tokens_per_s
        sec = ck * (wall_samples * t.fill * max_new / t.rollout_tokens_per_s + rounds * tail)
        detail = f"{ck} checkpoint(s) x {tokens / 1e6:.0f}M generated tokens"
    if few and gpus > 1:
        detail += f"; GPUs busy of {gpus} (chunks of {EVAL_CHUNK_PROBLEMS} problems): {', '.join(few)}"
    limit_h = res.time_min / 60
    if sec / 3600 > limit_h:
        attempts = math.ceil(sec / 3600 / limit_h)
        detail += (f"; over the {fmt_h(limit_h)} limit (evaluate.time_min): {attempts} attempts, requeued at "
                   f"the limit, finished chunks kept")
    return Estimate(sec / 3600, gpus, res.nodes if gpus else 0, 0, detail)


def estimate_jobs(preset, jobs, t: Throughput) -> dict[str, Estimate]:
    """key -> Estimate of every job of a plan (GPU presets, or any preset the pilot measured)."""
    n = _n_params(preset)
    out: dict[str, Estimate] = {}
    for j in jobs:
        if j.kind == "train":
            out[j.key] = train_estimate(preset, j, t, n)
        elif j.kind == "evaluate":
            out[j.key] = eval_estimate(preset, j, t)
        elif j.kind == "wait_checkpoint":
            out[j.key] = Estimate(0.0, watch=(j.info["watch"], float(j.info["fraction"])),
                                  detail=f"ends when {j.info['watch']} has saved step {j.info['step']}")
        else:
            out[j.key] = Estimate(CPU_JOB_H.get(j.kind, 0.1))
    return out


# ------------------------------------------------------------------------------------------- schedule
def simulate(jobs, est: dict[str, Estimate], cluster_nodes: Optional[int] = None) -> dict:
    """Start and end hours of every job when the plan runs on `cluster_nodes` nodes (None: as many as it
    wants): ready jobs start in the plan's order as soon as their dependencies have ended and their nodes are
    free (jobs that fit side by side run in parallel; a CPU job takes no node). A `wait_checkpoint` job ends
    when the job it watches is that fraction through. Returns {"start", "end", "makespan", "path",
    "peak_nodes"} (`path`: the chain of jobs that determined the last end; `peak_nodes`: the most nodes in
    use at once)."""
    from slurm.launcher import topo_order
    order = topo_order(jobs)
    by = {j.key: j for j in order}
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    why: dict[str, Optional[str]] = {}
    free = cluster_nodes if cluster_nodes is not None else 10 ** 9
    for j in order:
        if est[j.key].nodes > free and cluster_nodes is not None:
            raise PlanError(f"job {j.key} needs {est[j.key].nodes} nodes; the cluster has {cluster_nodes} "
                            f"(--cluster-nodes)")
    running: list[tuple[float, str]] = []
    now = 0.0
    pending = list(order)
    total = free
    peak = 0
    while pending or running:
        progressed = True
        while progressed:
            progressed = False
            for j in list(pending):
                if not all(d in end and end[d] <= now for d in j.deps):
                    continue
                e = est[j.key]
                if e.watch is not None:
                    w = e.watch[0]
                    if w not in start:
                        continue
                    start[j.key] = now
                    end[j.key] = max(now, start[w] + e.watch[1] * est[w].hours)
                    why[j.key] = w
                    heapq.heappush(running, (end[j.key], j.key))
                    pending.remove(j)
                    progressed = True
                    continue
                if e.nodes > free:
                    continue
                free -= e.nodes
                peak = max(peak, total - free)
                start[j.key], end[j.key] = now, now + e.hours
                why[j.key] = max(j.deps, key=lambda d: end[d]) if j.deps else None
                heapq.heappush(running, (end[j.key], j.key))
                pending.remove(j)
                progressed = True
        if not running:
            if pending:
                raise PlanError(f"cannot schedule {pending[0].key}")
            break
        now, key = heapq.heappop(running)
        free += est[key].nodes
        while running and running[0][0] <= now:
            free += est[heapq.heappop(running)[1]].nodes
    last = max(end, key=lambda k: end[k]) if end else None
    path = []
    k = last
    while k is not None:
        path.append(k)
        k = why.get(k)
    return {"start": start, "end": end, "makespan": end[last] if last else 0.0, "path": path[::-1],
            "by": by, "peak_nodes": peak}


def fmt_h(h: float) -> str:
    return f"{h:,.1f} h" + (f" ({h / 24:.1f} d)" if h >= 48 else "")


def fmt_bytes(b: float) -> str:
    return f"{b / 1e12:,.2f} TB" if b >= 1e12 else f"{b / 1e9:,.1f} GB"


def _total(est: dict[str, Estimate]) -> tuple[float, float]:
    gpuh = sum(e.gpu_hours for e in est.values())
    return gpuh, sum(e.gpu_hours for k, e in est.items() if k.startswith("stage"))


def branch_lines(jobs, est: Optional[dict[str, Estimate]] = None) -> list[str]:
    """What sharing saves: the branched train jobs, the steps they do not repeat and (sized) their
    GPU-hours."""
    est = est or {}
    rows = [(j, est.get(j.key, Estimate(0.0))) for j in jobs if j.kind == "train" and j.info.get("branch")]
    if not rows:
        return []
    saved = sum(e.saved_gpu_hours for _, e in rows)
    scratch = sum(e.gpu_hours for e in est.values()) + saved
    sib = [j for j, _ in rows if j.info["branch"]["kind"] == "sibling"]
    steps = sum(int(j.info.get("steps_saved") or 0) for j, _ in rows)
    out = [f"branching: {len(sib)} run(s) start from a sibling's checkpoint, {len(rows) - len(sib)} "
           f"control(s) continue their stage-1 run: {steps:,} steps not repeated, {saved:,.0f} GPU-hours "
           f"saved ({100 * saved / scratch if scratch else 0:.0f} % of the plan run from every start)"
           if any(e.gpus for _, e in rows) else
           f"branching: {len(sib)} run(s) start from a sibling's checkpoint, {len(rows) - len(sib)} "
           f"control(s) continue their stage-1 run: {steps:,} steps not repeated"]
    for j, e in rows:
        b = j.info["branch"]
        out.append(f"  {j.key:<34} from {b['source']} step {b['step']}: {j.info.get('steps_saved', 0)} "
                   f"steps" + (f", {e.saved_gpu_hours:,.0f} GPU-hours" if e.gpus else ""))
    return out


def summary_lines(preset, jobs, est: dict[str, Estimate], t: Throughput, cluster_nodes: int,
                  ranges: Optional[list[tuple[Throughput, dict[str, Estimate]]]] = None) -> list[str]:
    """Totals of a plan: GPU-hours (a low-high range while the assumption is not measured), what branching
    saves, checkpoint volume, the critical path and the time on `cluster_nodes`."""
    n = _n_params(preset)
    gpuh, train_h = _total(est)
    vol = sum(e.ckpt_bytes for e in est.values())
    inf = simulate(jobs, est, None)
    fin = simulate(jobs, est, cluster_nodes)
    per = checkpoint_volume(n, 1)["per_save"] if n else None
    gpu = any(e.gpus for e in est.values())
    out = [t.describe(n)]
    if gpu:
        out.append(f"total: {gpuh:,.0f} GPU-hours ({train_h:,.0f} training, {gpuh - train_h:,.0f} evaluation)"
                   + (" [measured]" if t.measured else f" [{t.label}]"))
    else:
        hours = sum(e.hours for e in est.values())
        out.append(f"total: {hours:,.2f} job-hours on CPU (no GPU)" + (" [measured]" if t.measured else ""))
    if ranges and len(ranges) > 1:
        tot = [(x.label, _total(e)[0]) for x, e in ranges]
        out.append("cost range (not measured; a pilot measures it: --pilot): " + ", ".join(
            f"{label} {v:,.0f}" for label, v in tot) + " GPU-hours")
        for x, _ in ranges:
            if x.label != "expected":
                out.append(f"  {x.label}: responses {x.fill:.3g} of max_response, tails at "
                           f"{x.decode_tokens_per_s:g} tok/s, {x.push_s:g} s a push, reference samples for "
                           + ("1.0 x B of the drawn prompts" if x.anchor_share is None and x.label == "low"
                              else "the lazy 1.5 x B" if x.anchor_share is None
                              else f"{x.anchor_share:g} of the drawn prompts"))
    out += branch_lines(jobs, est)
    out += ["checkpoints: " + (f"{fmt_bytes(vol)} kept at the end under the retention policy "
                               f"({fmt_bytes(per)} a save: bf16 export 2N + fp32 masters 4N + AdamW 8N, "
                               f"+ πref 2N in a run that resets it, N = {n / 1e9:.2f}B)" if n
                               else "model shape unknown"),
            f"critical path (unlimited nodes): {fmt_h(inf['makespan'])}, with {inf['peak_nodes']:,} nodes "
            f"at once at its peak: {' -> '.join(inf['path'])}",
            f"on {cluster_nodes} node(s) (jobs side by side when their nodes are free): "
            f"{fmt_h(fin['makespan'])}"]
    train = next((j for j in jobs if j.kind == "train"), None)
    if train is not None and train.resources is not None and train.resources.gpus_per_node:
        out += failure_lines(preset, train.resources, t, n)
    return out


def preemption_steps(schedule) -> int:
    """Completed steps a preemption can cost a train job at most: SLURM gives it its grace (KillWait +
    GraceTime, often 30 s) before SIGKILL, too short for a save, so it resumes from its last training state
    (schedule.state_every, written in the background) or, without them, its last checkpoint (save_every).
    The step in flight is lost besides. Holds while a state's write takes less than a step."""
    return min(schedule.state_every or schedule.save_every, schedule.save_every)


def failure_lines(preset, res, t: Throughput, n_params: Optional[int]) -> list[str]:
    """What a preemption and a hung rank cost a train job of the plan (its base config)."""
    cfg, gpus = preset.cfg, res.nodes * res.gpus_per_node
    s, pc = cfg.schedule, cfg.parallel
    k = preemption_steps(s)
    step_s = train_step_seconds(cfg, t, gpus, n_params)
    how = (f"its training state every {s.state_every} step(s) (schedule.state_every, written in the "
           f"background)" if s.state_every and s.state_every < s.save_every
           else f"its checkpoint every {s.save_every} steps (schedule.save_every; no schedule.state_every)")
    per_rank = (12 * n_params / max(1, res.world_size) / 1e9) if n_params else None
    out = [f"preemption: SIGKILL after the cluster's grace (KillWait + GraceTime; torchrun's "
           f"--shutdown-timeout is set to it): a train job resumes from {how}: at most {k} completed step(s) "
           f"lost + the one in flight, about {fmt_h((k + 1) * step_s / 3600)} of its {gpus} GPUs"
           + (f" (while a state's write, {per_rank:.1f} GB a rank, takes less than a step)" if per_rank and
              s.state_every else "")]
    if pc.stall_steps:
        first = pc.stall_steps * pc.stall_min_s
        out.append(f"hung rank: the job ends naming it once no rank has advanced for parallel.stall_steps x "
                   f"max(longest step, parallel.stall_min_s) = {pc.stall_steps:g} x max(~{step_s:,.0f} s, "
                   f"{pc.stall_min_s:,.0f} s) = {fmt_h(pc.stall_steps * max(step_s, pc.stall_min_s) / 3600)} "
                   f"({fmt_h(first / 3600)} before its first step), not parallel.timeout_s = "
                   f"{fmt_h(pc.timeout_s / 3600)}")
    else:
        out.append(f"hung rank: no watchdog (parallel.stall_steps 0): the job waits out parallel.timeout_s = "
                   f"{fmt_h(pc.timeout_s / 3600)}")
    return out


# ------------------------------------------------------------------------------------------- checks
def check_plan(preset, res: dict, t: Throughput, mem_key: str = "train.mem_gb") -> None:
    """Plan-time errors of a GPU preset, each naming its key and value: a host-memory request below the
    estimate, a collective timeout below one generation round's expected time, a tensor-parallel size that
    does not divide the GPUs per node, a stop grace below one step, a watchdog floor (parallel.stall_steps x
    stall_min_s, what it waits before the first step) below one step."""
    cfg = preset.cfg
    train = res["train"]
    if not train.gpus_per_node:
        return
    tp = cfg.rollout.tensor_parallel_size
    if train.gpus_per_node % tp:
        raise PlanError(f"rollout.tensor_parallel_size: {tp} does not divide the {train.gpus_per_node} GPUs "
                        f"per node (train.gpus_per_node)")
    n = _n_params(preset)
    if n is not None and train.mem_gb is not None:
        need = host_memory_gb(n, train.ranks_per_node, train.nodes, cfg.rollout.engine,
                              cfg.reward.grader_workers, _export_bytes(cfg), _max_rollout_tokens(preset),
                              bool(cfg.schedule.state_every))
        if train.mem_gb < need:
            raise PlanError(f"{mem_key}: {train.mem_gb:g} is below the host-memory estimate of {need:.0f} GB "
                            f"per node ({train.ranks_per_node} ranks x (vLLM weight backup 2N + "
                            f"{HOST_RANK_OVERHEAD_GB:g} GB + a step's rollouts) + the node's share of the HF "
                            f"export; reproduce/sizing.py)")
    gpus = train.nodes * train.gpus_per_node
    b, L = cfg.batch, cfg.lengths
    round_tokens = (cfg.rollout.gen_batch_prompts
                    or b.prompts_per_step) * b.group_size * t.fill * L.max_response
    round_s = (t.measured.dapo_step_s if t.measured else
               round_tokens / (t.rollout_tokens_per_s * gpus) + tail_seconds(cfg, t))
    if cfg.parallel.timeout_s < round_s:
        raise PlanError(f"parallel.timeout_s: {cfg.parallel.timeout_s:g} is below one generation round's "
                        f"expected {round_s:,.0f} s ({round_tokens / 1e6:.0f}M tokens over {gpus} GPUs at "
                        f"{t.rollout_tokens_per_s:,.0f} tok/s/GPU and its tail; {t.source})")
    if train.stop_grace_s is not None:
        step_s = train_step_seconds(cfg, t, gpus, n)
        if train.stop_grace_s < step_s:
            raise PlanError(f"train.stop_grace_s: {train.stop_grace_s:g} is below one step and its save "
                            f"({step_s:,.0f} s expected; {t.source}): "
                            "a time-limit requeue would lose the step")
    pc = cfg.parallel
    step_s = train_step_seconds(cfg, t, gpus, n)
    if pc.stall_steps and pc.stall_steps * pc.stall_min_s < step_s:
        raise PlanError(f"parallel.stall_min_s: {pc.stall_min_s:g} x parallel.stall_steps {pc.stall_steps:g} "
                        f"is below one step and its save ({step_s:,.0f} s expected; {t.source}): the "
                        f"watchdog could end a healthy run before its first step")

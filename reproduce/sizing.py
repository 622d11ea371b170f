"""A plan sized in hours, GPU-hours and disk, and the plan-time checks of a GPU preset's job shape.

    est = estimate_jobs(preset, jobs, throughput(preset))   # key -> Estimate (hours, GPUs, checkpoint bytes)
    print("\n".join(summary_lines(jobs, est, cluster_nodes=16)))

Every figure is an estimate from the preset's token budgets and a named throughput assumption (`Throughput`,
from the protocol's keys, the driver's flags or a `bench.gpu_check` report), never a measurement:

  rollout tokens of a step   = gen_batch_prompts x group_size x fill x max_response (one generation round)
                               + anchors: prompts_per_step x ref_n x fill x max_response
  trained tokens of a step   = prompts_per_step x group_size x fill x (max_prompt + max_response) x epochs
                               x (1 + 1/4 per extra forward pass: old policy, πref, teacher)
  validation tokens          = problems x samples x fill x max_response, every validate_every steps
  hours of a train job       = steps x (rollout / (R x GPUs) + trained / (U x GPUs)) + validation / (R x GPUs)
                               + saves x save_s
  hours of an evaluate job   = checkpoints x sum over benchmarks (problems x k x fill x max_response)
                               / (R x GPUs)

R, U: rollout and update tokens/s per GPU; fill: mean response length / lengths.max_response. Checkpoint
volume: `checkpoint_volume` (the one formula). The graph's cost and the budget's choice of items:
reproduce/dag/budget.py.
"""
from __future__ import annotations

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
DEFAULT_FILL = 0.5              # mean response length / lengths.max_response: assumed
DEFAULT_SAVE_S = 300.0          # seconds per checkpoint save: assumed
CPU_JOB_H = {"stage": 1.0, "world": 0.1, "select_peak": 0.05, "collect": 0.1, "figures": 0.1}
# problems of the published sets (the eval registry's benchmarks); others count as UNKNOWN_PROBLEMS
PROBLEMS = {"aime24": 30, "aime25": 30, "amc": 83, "amc23": 40, "math500": 500, "minerva": 272,
            "olympiadbench": 675, "gpqa_diamond": 198, "mmlu_pro": 12032, "mmlu_pro_sample300": 300}
UNKNOWN_PROBLEMS = 500
# host memory of one rank beside vLLM's weight backup: the Python process, torch, CUDA's host side, the data
HOST_RANK_OVERHEAD_GB = 8.0


class PlanError(ValueError):
    pass


@dataclass
class Throughput:
    """The assumption every hour in a plan rests on (named in its output)."""
    rollout_tokens_per_s: float = DEFAULT_ROLLOUT_TPS
    update_tokens_per_s: Optional[float] = None     # None: from update_mfu and the model's FLOPs per token
    update_mfu: float = DEFAULT_UPDATE_MFU
    fill: float = DEFAULT_FILL
    save_s: float = DEFAULT_SAVE_S
    source: str = "assumed (reproduce/sizing.py defaults), not measured"

    def update_tps(self, n_params: Optional[int]) -> float:
        """U: trained tokens/s per GPU; from the MFU at 8 N FLOPs per token (forward 2N, backward 4N,
        recomputation 2N) when no figure is given."""
        if self.update_tokens_per_s:
            return self.update_tokens_per_s
        return self.update_mfu * PEAK_TFLOPS * 1e12 / (8 * (n_params or 7e9))

    def describe(self, n_params: Optional[int]) -> str:
        u = (f"update {self.update_tps(n_params):,.0f} trained tok/s/GPU" if self.update_tokens_per_s else
             f"update {self.update_tps(n_params):,.0f} trained tok/s/GPU (MFU {self.update_mfu:g} of "
             f"{PEAK_TFLOPS:g} TFLOP/s at 8·N FLOPs/token)")
        return (f"throughput: rollout {self.rollout_tokens_per_s:,.0f} generated tok/s/GPU, {u}, responses "
                f"{self.fill:g} of max_response on average, one generation round per step, {self.save_s:g} s "
                f"per save [{self.source}]")


def throughput(preset, rollout_tps: Optional[float] = None, update_tps: Optional[float] = None,
               fill: Optional[float] = None, save_s: Optional[float] = None,
               gpu_check: Optional[str | Path] = None) -> Throughput:
    """The plan's assumption: defaults < the preset's protocol keys < a bench.gpu_check report < flags."""
    p = preset.protocol
    t = Throughput()
    src = []
    for name, attr in (("rollout_tokens_per_s", "rollout_tokens_per_s"),
                       ("update_tokens_per_s", "update_tokens_per_s"), ("response_fill", "fill"),
                       ("save_s", "save_s")):
        v = getattr(p, name, None)
        if v is not None:
            setattr(t, attr, float(v))
            src.append(f"protocol.{name}")
    if gpu_check:
        got = from_gpu_check(gpu_check, _n_params(preset))
        for k, v in got.items():
            setattr(t, k, v)
        src.append(f"{gpu_check}: {', '.join(got) or 'no usable figure'}")
    for attr, v, flag in (("rollout_tokens_per_s", rollout_tps, "--rollout-tokens-per-s"),
                          ("update_tokens_per_s", update_tps, "--update-tokens-per-s"),
                          ("fill", fill, "--response-fill"), ("save_s", save_s, "--save-s")):
        if v is not None:
            setattr(t, attr, float(v))
            src.append(flag)
    if not t.rollout_tokens_per_s > 0:
        raise PlanError(f"throughput rollout_tokens_per_s: {t.rollout_tokens_per_s!r} must be > 0")
    if not t.save_s >= 0:
        raise PlanError(f"throughput save_s: {t.save_s!r} must be >= 0")
    if t.update_tokens_per_s is not None and not t.update_tokens_per_s > 0:
        raise PlanError(f"throughput update_tokens_per_s: {t.update_tokens_per_s!r} must be > 0")
    if not 0 < t.fill <= 1:
        raise PlanError(f"throughput response_fill: {t.fill!r} must be in (0, 1]")
    if src:
        t.source = "from " + "; ".join(src) + "; the rest assumed (reproduce/sizing.py defaults)"
    return t


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
                      export_bytes: int = 2, master_bytes: int = 4, optimizer_bytes: int = 8) -> dict:
    """Bytes on disk of one run's checkpoints under the retention policy: each save holds the HF export in the
    published dtype (bf16: 2 N), the sharded fp32 masters (4 N) and AdamW's two moments (8 N); the run keeps
    its last `keep_last` resumable states (schedule.keep_last; None: every save) plus its `protected` steps
    (θ*, late start, evaluated steps, the best validation), counted as full saves (an upper bound)."""
    per_save = n_params * (export_bytes + master_bytes + optimizer_bytes)
    kept = saves if keep_last is None else min(saves, keep_last + protected)
    return {"per_save": per_save, "saves": saves, "kept": kept, "bytes": kept * per_save}


def host_memory_gb(n_params: int, ranks_per_node: int, nodes: int = 1, engine: str = "vllm",
                   grader_workers: int = 0, export_bytes: int = 2) -> float:
    """Host memory one training node needs (GB, 1e9 bytes): per rank vLLM's sleep-mode weight backup in
    pinned memory (bf16: 2 N), HOST_RANK_OVERHEAD_GB and 0.5 GB per grader worker; and the node's share of
    the HF export its ranks hold on CPU while they write their parts (armor.checkpoint.export_parts: the
    parts are even in bytes over all ranks, so export_bytes N / nodes)."""
    backup = 2 * n_params / 1e9 if engine == "vllm" else 0.0
    per_rank = backup + HOST_RANK_OVERHEAD_GB + 0.5 * grader_workers
    return ranks_per_node * per_rank + export_bytes * n_params / 1e9 / nodes


def default_host_memory(preset) -> dict[str, float]:
    """{kind: GB} a GPU preset's train and evaluate jobs request per node (rounded up to 10 GB)."""
    p = preset.protocol
    n = _n_params(preset)
    if not p.gpus_per_node or n is None:
        return {}
    ranks = p.procs_per_node or p.gpus_per_node
    cfg = preset.cfg
    train = host_memory_gb(n, ranks, p.nodes, cfg.rollout.engine, cfg.reward.grader_workers,
                           _export_bytes(cfg))
    evaluate = p.gpus_per_node * (2 * n / 1e9 + HOST_RANK_OVERHEAD_GB)
    return {"train": 10 * math.ceil(train / 10), "evaluate": 10 * math.ceil(evaluate / 10)}


# ------------------------------------------------------------------------------------------- estimates
@dataclass
class Estimate:
    hours: float
    gpus: int = 0
    nodes: int = 0                 # whole nodes the job holds (0: a CPU job beside the others)
    ckpt_bytes: int = 0
    detail: str = ""
    watch: Optional[tuple[str, float]] = None   # (job, fraction): ends when that job is this far through

    @property
    def gpu_hours(self) -> float:
        return self.hours * self.gpus


def _bench_name(b: str) -> str:
    return b.split("=", 1)[0]


def _needs_reference(cfg) -> int:
    """Extra forward passes of an update besides the old policy's: πref's (the trainer's rule,
    armor.config.needs_reference_logprobs) and a separate teacher's."""
    from armor.config import needs_reference_logprobs
    a = cfg.algo
    return int(needs_reference_logprobs(cfg)) + int(a.distill.mode != "none" and bool(a.distill.teacher_path))


def step_tokens(cfg, t: Throughput) -> tuple[float, float]:
    """(generated, trained) tokens of one step: on-policy (and anchor) samples at t.fill of max_response; the
    update's passes over prompt + response, plus the extra forwards (πref, teacher) at 1/4 of a pass each."""
    b, L, r = cfg.batch, cfg.lengths, cfg.rollout
    resp = t.fill * L.max_response
    gen = (r.gen_batch_prompts or b.prompts_per_step) * b.group_size * resp
    if cfg.algo.anchor.enabled:
        gen += b.prompts_per_step * cfg.algo.anchor.ref_n * resp
    trained = b.prompts_per_step * b.group_size * t.fill * (L.max_prompt + L.max_response) * b.epochs
    return gen, trained * (1 + 0.25 * (1 + _needs_reference(cfg)))


def train_step_seconds(cfg, t: Throughput, gpus: int, n_params: Optional[int]) -> float:
    """Expected seconds of one training step and a save on `gpus` GPUs (train_estimate's per-step terms)."""
    gen, trained = step_tokens(cfg, t)
    g = max(1, gpus)
    return gen / (t.rollout_tokens_per_s * g) + trained / (t.update_tps(n_params) * g) + t.save_s


def train_estimate(preset, job, t: Throughput, n_params: Optional[int]) -> Estimate:
    from armor.config import load_config
    res = job.resources
    gpus = res.nodes * res.gpus_per_node
    cfg = load_config(preset.path, job.info.get("arm_overrides", []))
    steps = int(job.info.get("steps") or cfg.schedule.total_steps)
    resp = t.fill * cfg.lengths.max_response
    gen, trained = step_tokens(cfg, t)
    v = cfg.validation
    val_tokens = sum(min(PROBLEMS.get(_bench_name(x), UNKNOWN_PROBLEMS), v.max_problems or 10 ** 9)
                     for x in v.benchmarks) * v.samples * resp
    vals = steps // cfg.schedule.validate_every + 1 if cfg.schedule.validate_every else 0
    saves = math.ceil(steps / cfg.schedule.save_every)
    R, U = t.rollout_tokens_per_s, t.update_tps(n_params)
    g = max(1, gpus)
    sec = steps * (gen / (R * g) + trained / (U * g)) + vals * val_tokens / (R * g) + saves * t.save_s
    vol = 0
    if n_params:
        protected = len(job.info.get("protected_steps", [])) + 1
        vol = checkpoint_volume(n_params, saves, cfg.schedule.keep_last, protected)["bytes"]
    return Estimate(sec / 3600, gpus, res.nodes if gpus else 0, vol,
                    f"{steps} steps x ({gen / 1e6:.0f}M generated + {trained / 1e6:.0f}M trained tokens), "
                    f"{vals} validations, {saves} saves (kept: {_kept(cfg, saves, job)})")


def _kept(cfg, saves: int, job) -> str:
    k = cfg.schedule.keep_last
    return (f"all {saves}" if k is None
            else f"last {k} + {len(job.info.get('protected_steps', [])) + 1} protected")


def eval_checkpoints(preset, stage: int, steps: int) -> int:
    """Checkpoints an arm's evaluation reads (reproduce/evalplan.eval_steps): θ* for a baseline; the best by
    validation, every eval_every-th and the table step for a stage-2 arm."""
    if stage == 1:
        return 1
    saves = math.ceil(steps / preset.cfg.schedule.save_every)
    n = preset.protocol.eval_every
    return min(saves, 2 + (math.ceil(saves / n) if n else 0))


def eval_estimate(preset, job, t: Throughput) -> Estimate:
    from eval.protocols import get_protocol
    res = job.resources
    gpus = res.nodes * res.gpus_per_node
    proto = get_protocol(preset.protocol.eval_protocol)
    max_new = proto.max_new_tokens or preset.cfg.lengths.max_response
    tokens = 0.0
    for b in preset.protocol.eval_benchmarks:
        name = _bench_name(b)
        k = preset.protocol.eval_samples or proto.setting(name).samples
        n = PROBLEMS.get(name, UNKNOWN_PROBLEMS)
        if preset.protocol.eval_limit:
            n = min(n, preset.protocol.eval_limit)
        tokens += n * k * t.fill * max_new
    ck = eval_checkpoints(preset, int(job.info.get("stage", 2)), int(job.info.get("steps") or 0))
    sec = ck * tokens / (t.rollout_tokens_per_s * max(1, gpus))
    return Estimate(sec / 3600, gpus, res.nodes if gpus else 0, 0,
                    f"{ck} checkpoint(s) x {tokens / 1e6:.0f}M generated tokens")


def estimate_jobs(preset, jobs, t: Throughput) -> dict[str, Estimate]:
    """key -> Estimate of every job of a GPU preset's plan."""
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
    when the job it watches is that fraction through. Returns {"start", "end", "makespan", "path"} (`path`:
    the chain of jobs that determined the last end)."""
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
            "by": by}


def fmt_h(h: float) -> str:
    return f"{h:,.1f} h" + (f" ({h / 24:.1f} d)" if h >= 48 else "")


def fmt_bytes(b: float) -> str:
    return f"{b / 1e12:,.2f} TB" if b >= 1e12 else f"{b / 1e9:,.1f} GB"


def summary_lines(preset, jobs, est: dict[str, Estimate], t: Throughput, cluster_nodes: int) -> list[str]:
    """Totals of a plan: GPU-hours, checkpoint volume, the critical path and the time on `cluster_nodes`."""
    n = _n_params(preset)
    gpuh = sum(e.gpu_hours for e in est.values())
    train_h = sum(e.gpu_hours for k, e in est.items() if k.startswith("stage"))
    vol = sum(e.ckpt_bytes for e in est.values())
    inf = simulate(jobs, est, None)
    fin = simulate(jobs, est, cluster_nodes)
    per = checkpoint_volume(n, 1)["per_save"] if n else None
    out = [t.describe(n),
           f"total: {gpuh:,.0f} GPU-hours ({train_h:,.0f} training, {gpuh - train_h:,.0f} evaluation)",
           "checkpoints: " + (f"{fmt_bytes(vol)} kept at the end under the retention policy "
                              f"({fmt_bytes(per)} a save: bf16 export 2N + fp32 masters 4N + AdamW 8N, "
                              f"N = {n / 1e9:.2f}B)" if n else "model shape unknown"),
           f"critical path (unlimited nodes): {fmt_h(inf['makespan'])}: {' -> '.join(inf['path'])}",
           f"on {cluster_nodes} node(s) (jobs side by side when their nodes are free): "
           f"{fmt_h(fin['makespan'])}"]
    return out


# ------------------------------------------------------------------------------------------- checks
def check_plan(preset, res: dict, t: Throughput, mem_key: str = "train.mem_gb") -> None:
    """Plan-time errors of a GPU preset, each naming its key and value: a host-memory request below the
    estimate, a collective timeout below one generation round's expected time, a tensor-parallel size that
    does not divide the GPUs per node."""
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
                              cfg.reward.grader_workers, _export_bytes(cfg))
        if train.mem_gb < need:
            raise PlanError(f"{mem_key}: {train.mem_gb:g} is below the host-memory estimate of {need:.0f} GB "
                            f"per node ({train.ranks_per_node} ranks x (vLLM weight backup 2N + "
                            f"{HOST_RANK_OVERHEAD_GB:g} GB) + the node's share of the HF export; "
                            f"reproduce/sizing.py)")
    gpus = train.nodes * train.gpus_per_node
    b, L = cfg.batch, cfg.lengths
    round_tokens = (cfg.rollout.gen_batch_prompts
                    or b.prompts_per_step) * b.group_size * t.fill * L.max_response
    round_s = round_tokens / (t.rollout_tokens_per_s * gpus)
    if cfg.parallel.timeout_s < round_s:
        raise PlanError(f"parallel.timeout_s: {cfg.parallel.timeout_s:g} is below one generation round's "
                        f"expected {round_s:,.0f} s ({round_tokens / 1e6:.0f}M tokens over {gpus} GPUs at "
                        f"{t.rollout_tokens_per_s:,.0f} tok/s/GPU; {t.source})")
    if train.stop_grace_s is not None:
        step_s = train_step_seconds(cfg, t, gpus, n)
        if train.stop_grace_s < step_s:
            raise PlanError(f"train.stop_grace_s: {train.stop_grace_s:g} is below one step and its save "
                            f"({step_s:,.0f} s expected; {t.source}): "
                            "a time-limit requeue would lose the step")

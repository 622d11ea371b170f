"""The dry run's totals of a sized plan (`total_lines`): the throughput it rests on, GPU-hours and their
range, what branching saves (`branch_lines`), checkpoint volume, the critical path and the time on the
cluster, and what a preemption and a hung rank cost (`failure_lines`)."""
from __future__ import annotations

from typing import Optional

from reproduce.sizing.estimates import Estimate, fmt_bytes, fmt_h
from reproduce.sizing.footprint import checkpoint_volume
from reproduce.sizing.step_model import preemption_steps, train_step_seconds
from reproduce.sizing.throughput import Throughput, model_params
from reproduce.sizing.timeline import simulate


def _total(est: dict[str, Estimate]) -> tuple[float, float]:
    """(GPU-hours of every job, of the stage-1 and stage-2 training jobs)."""
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


def total_lines(preset, jobs, est: dict[str, Estimate], t: Throughput, cluster_nodes: int,
                  ranges: Optional[list[tuple[Throughput, dict[str, Estimate]]]] = None) -> list[str]:
    """Totals of a plan: GPU-hours (a low-high range while the assumption is not measured), what branching
    saves, checkpoint volume, the critical path and the time on `cluster_nodes`."""
    n = model_params(preset)
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
    if ranges and len(ranges) > 1 and t.measured is not None:
        tot = [(x.label, _total(e)[0]) for x, e in ranges]
        out.append("cost range (measured by the pilot; its high end with longer responses): " + ", ".join(
            f"{label} {v:,.0f}" for label, v in tot) + " GPU-hours")
        out += [f"  {x.label}: {x.source}; tails at {x.decode_tokens_per_s:g} tok/s" for x, _ in ranges[1:]]
        out += pilot_beside_assumed(preset, t, train_gpus(jobs))
    elif ranges and len(ranges) > 1:
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


def train_gpus(jobs) -> int:
    """GPUs of the plan's training jobs (its first train job's shape), 1 when none has GPUs."""
    train = next((j for j in jobs if j.kind == "train" and j.resources is not None), None)
    return max(1, train.resources.nodes * train.resources.gpus_per_node) if train else 1


def pilot_beside_assumed(preset, t: Throughput, gpus: int) -> list[str]:
    """The pilot's figures beside the assumed expected ones they replace, on the plan's `gpus`: a DAPO and
    an ARMOR step, a save, a push, one validation, the mean response."""
    from reproduce.matrix.arms import build_arms
    from reproduce.sizing.step_model import model_config, step_parts, validation_seconds
    from reproduce.sizing.throughput import throughput
    m, n = t.measured, model_params(preset)
    a = throughput(preset)
    arms = build_arms(preset)
    cfgs = {name: model_config(str(preset.path), tuple(arms[name].overrides)) if arms[name].overrides
            else preset.cfg for name in ("dapo", "armor") if name in arms}

    def step(cfg, x):
        return sum(v for k, v in step_parts(cfg, x, gpus, n).items())
    rows = [(f"{name.upper()} step (s)", step(c, t), step(c, a)) for name, c in cfgs.items()]
    rows += [("save (s)", m.save_s, a.save_s), ("push (s)", m.push_s, a.push_s),
             ("validation (s)", validation_seconds(preset.cfg, t, gpus),
              validation_seconds(preset.cfg, a, gpus)),
             ("mean response (tokens)", m.response_tokens, a.fill * preset.cfg.lengths.max_response)]
    return ([f"the pilot beside the assumption it replaces (on {gpus} GPUs; assumed: {DEFAULTS_NOTE}):"]
            + [f"  {what:<24} pilot {got:>10,.1f}   assumed {want:>10,.1f}" for what, got, want in rows])


DEFAULTS_NOTE = "reproduce/sizing/throughput.py's expected figures, the paper's lengths"


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

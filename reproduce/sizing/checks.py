"""Plan-time errors of a GPU preset's job shape (`check_plan`), each naming its key and value, before any
job is submitted."""
from __future__ import annotations

from reproduce.sizing.footprint import HOST_RANK_OVERHEAD_GB, train_host_memory_gb
from reproduce.sizing.step_model import tail_seconds, train_step_seconds
from reproduce.sizing.throughput import SizingError, Throughput, model_params


def check_plan(preset, res: dict, t: Throughput, mem_key: str = "train.mem_gb", pilot: bool = False) -> None:
    """Plan-time errors of a GPU preset, each naming its key and value: a host-memory request below the
    estimate, a collective timeout below one generation round's expected time, a tensor-parallel size that
    does not divide the GPUs per node, a stop grace below one step, a watchdog floor (parallel.stall_steps x
    stall_min_s, what it waits before the first step) below one step. pilot: `res` is the pilot's (train on
    one node): its host memory is the pilot's estimate (footprint.train_host_memory_gb), its rounds and
    steps the plan's (each of its GPUs does what one of the full run's does)."""
    cfg = preset.cfg
    train = res["train"]
    if not train.gpus_per_node:
        return
    tp = cfg.rollout.tensor_parallel_size
    if train.gpus_per_node % tp:
        raise SizingError(f"rollout.tensor_parallel_size: {tp} does not divide the {train.gpus_per_node} "
                          f"GPUs per node (train.gpus_per_node)")
    n = model_params(preset)
    if n is not None and train.mem_gb is not None:
        need = train_host_memory_gb(preset, train.ranks_per_node, train.nodes, pilot)
        if train.mem_gb < need:
            raise SizingError(f"{mem_key}: {train.mem_gb:g} is below the host-memory estimate of {need:.0f} "
                              f"GB per node ({train.ranks_per_node} ranks x (vLLM weight backup 2N + "
                              f"{HOST_RANK_OVERHEAD_GB:g} GB + a step's rollouts) + the node's share of the "
                              f"HF export; reproduce/sizing/footprint.py)")
    gpus = (max(1, preset.protocol.nodes) if pilot else train.nodes) * train.gpus_per_node
    b, L = cfg.batch, cfg.lengths
    round_tokens = (cfg.rollout.gen_batch_prompts
                    or b.prompts_per_step) * b.group_size * t.fill * L.max_response
    round_s = (t.measured.dapo_step_s if t.measured else
               round_tokens / (t.rollout_tokens_per_s * gpus) + tail_seconds(cfg, t))
    if cfg.parallel.timeout_s < round_s:
        raise SizingError(f"parallel.timeout_s: {cfg.parallel.timeout_s:g} is below one generation round's "
                          f"expected {round_s:,.0f} s ({round_tokens / 1e6:.0f}M tokens over {gpus} GPUs at "
                          f"{t.rollout_tokens_per_s:,.0f} tok/s/GPU and its tail; {t.source})")
    if train.stop_grace_s is not None:
        step_s = train_step_seconds(cfg, t, gpus, n)
        if train.stop_grace_s < step_s:
            raise SizingError(f"train.stop_grace_s: {train.stop_grace_s:g} is below one step and its save "
                              f"({step_s:,.0f} s expected; {t.source}): "
                              "a time-limit requeue would lose the step")
    pc = cfg.parallel
    step_s = train_step_seconds(cfg, t, gpus, n)
    if pc.stall_steps and pc.stall_steps * pc.stall_min_s < step_s:
        raise SizingError(f"parallel.stall_min_s: {pc.stall_min_s:g} x parallel.stall_steps "
                          f"{pc.stall_steps:g} is below one step and its save ({step_s:,.0f} s expected; "
                          f"{t.source}): the watchdog could end a healthy run before its first step")

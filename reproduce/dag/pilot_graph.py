"""The pilot's job graph (`python reproduce/run_all.py --preset P --pilot`): fetch | world -> pilot/dapo ->
pilot/armor -> pilot/eval -> pilot/report, on one node of the preset's training shape (reproduce/jobs/pilot.py
says what each measures), and, for a plan whose training spans nodes, pilot/net beside them: the two-node
network probe (reproduce/jobs/netprobe.py), which fails below its floor (`--net-floor-gbps`). Its keys live
beside the matrix's in runs/<preset>/_jobs (the fetch folder is shared).

    jobs = pilot_jobs(load_preset("qwen25-math-7b"), "runs")
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from common.jsonl import read_json
from reproduce import hub
from reproduce.dag.graph import JOB_ENV, _Inputs, _setup_jobs
from reproduce.dag.resources import preset_resources
from reproduce.jobs.evaluate import EVAL_RANKS_ENV
from reproduce.jobs.netprobe import FLOOR_GBPS, NET_FILE
from reproduce.jobs.pilot import ARMOR_STEPS, DAPO_STEPS, STOP_AT, pilot_dir
from reproduce.matrix.presets import Preset, run_done
from reproduce.sizing.footprint import checkpoint_volume, round_up_gb, train_host_memory_gb
from reproduce.sizing.step_model import export_bytes_per_param
from reproduce.sizing.throughput import PILOT_FILE, model_params, read_pilot
from slurm.launcher import Job
from slurm.resources import Resources

# a CPU preset's pilot asks for its stop through the wrapper's stop file too (the GPU train jobs' way)
CPU_STOP_GRACE_S = 120.0
NET_TIME_MIN = 15         # the network probe's time limit (it runs for seconds; start-up on two nodes)
NET_MEM_GB = 64           # its host memory: a process, torch and a CUDA context per rank, no model


def pilot_jobs(preset: Preset, root: str | Path, resources: Optional[dict] = None,
               fetch_dir: Optional[str | Path] = None, net_floor_gbps: float = FLOOR_GBPS,
               mem_gb: Optional[float] = None) -> list[Job]:
    """The pilot's jobs on the plan's resources `res`: its training on one node (`pilot_train`; mem_gb: a
    host-memory request given by --mem-gb instead of the one-node estimate)."""
    root = Path(root).resolve()
    res = resources or preset_resources(preset)
    sd = Path(fetch_dir).resolve() if fetch_dir else hub.default_fetch_dir(root)
    g = _Inputs(preset, root, [0], res, sd, hub.items(preset, sd), env=dict(JOB_ENV))
    d = pilot_dir(root, preset)
    setup = _setup_jobs(g)
    first = [j.key for j in setup]
    fetched = ["fetch"] if g.items else []
    train = res["train"]
    one = pilot_train(preset, train, mem_gb)
    jobs = list(setup)
    for phase, steps, deps in (("dapo", DAPO_STEPS, first), ("armor", ARMOR_STEPS, ["pilot/dapo"])):
        run = d / phase
        jobs.append(Job(f"pilot/{phase}", g.command("pilot-train", "--phase", phase, *g.fetch_args),
                        kind="pilot", deps=list(deps), resources=one, launch="torchrun", env=g.env,
                        done=lambda run=run, steps=steps: run_done(run, steps),
                        info={"overrides": f"pilot {phase}: {steps} steps on 1 node"},
                        description=f"pilot: {phase} on one node"))
    ev = res["evaluate"]
    env = dict(g.env)
    if ev.nodes * ev.gpus_per_node > 1:
        env[EVAL_RANKS_ENV] = str(ev.nodes * ev.gpus_per_node)
        env["ARMOR_THREADS"] = str(ev.threads_per_rank)
    jobs.append(Job("pilot/eval", g.command("pilot-eval", *g.fetch_args), kind="evaluate",
                    deps=["pilot/armor"] + fetched, resources=ev, env=env,
                    done=lambda: (d / "eval" / "times.json").is_file(),
                    description="pilot: an evaluation slice on every GPU of a node"))
    report = ["pilot/dapo", "pilot/armor", "pilot/eval"]
    if train.nodes > 1:                 # the plan's training spans nodes: probe the network between two
        net = dataclasses.replace(train, nodes=2, time_min=NET_TIME_MIN, stop_grace_s=None,
                                  mem_gb=min(train.mem_gb or NET_MEM_GB, NET_MEM_GB))
        jobs.append(Job("pilot/net", g.command("net-probe", "--floor-gbps", f"{net_floor_gbps:g}"),
                        kind="pilot", resources=net, launch="torchrun", env=g.env,
                        done=lambda: (read_json(d / NET_FILE) or {}).get("ok") is True,
                        description=f"pilot: an all-gather across two nodes (floor {net_floor_gbps:g} GB/s)"))
        report.append("pilot/net")
    jobs.append(Job("pilot/report", g.command("pilot-report"), kind="collect",
                    deps=report, resources=res["collect"], env=g.env,
                    done=lambda: read_pilot(d / PILOT_FILE) is not None,
                    description=f"pilot: what it measured -> {d / PILOT_FILE}"))
    return jobs



def pilot_train(preset: Preset, train: Resources, mem_gb: Optional[float] = None) -> Resources:
    """The pilot's training resources: the plan's `train` on one node, with the host memory of the plan's
    own one-node estimate for the pilot (reproduce/sizing/footprint.py train_host_memory_gb, pilot=True:
    every rank holds the node's 8 shards where the plan's hold 1/nodes of them, no background state saves),
    or `mem_gb` when given; a stop grace on CPU presets."""
    need = (train_host_memory_gb(preset, train.ranks_per_node, 1, pilot=True)
            if train.gpus_per_node else None)
    mem = mem_gb if mem_gb is not None else (round_up_gb(need) if need is not None else train.mem_gb)
    return dataclasses.replace(train, nodes=1, mem_gb=mem,
                               stop_grace_s=train.stop_grace_s or CPU_STOP_GRACE_S)


def pilot_disk_bytes(preset: Preset) -> Optional[int]:
    """Bytes the pilot's checkpoints take under its run folder (all kept): the DAPO phase's stop save
    (step STOP_AT) and last save, and the ARMOR phase's last save, which holds πref's shards too (it resets
    πref); None when the model's size is unknown (armor/memory.py KNOWN)."""
    from armor import memory
    n = model_params(preset)
    if n is None:
        return None
    cfg = preset.cfg
    kw = dict(export_bytes=export_bytes_per_param(cfg), master_bytes=memory.BYTES[cfg.model.dtype])
    dapo = checkpoint_volume(n, len({STOP_AT, DAPO_STEPS}), **kw)["bytes"]
    armor = checkpoint_volume(n, 1, reference_bytes=memory.BYTES[cfg.parallel.compute_dtype],
                                     **kw)["bytes"]
    return dapo + armor

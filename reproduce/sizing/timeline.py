"""When a plan's jobs would start and end on N nodes (`simulate`): the critical path, the makespan and the
most nodes in use at once, from the jobs' estimates (reproduce/sizing/estimates.py)."""
from __future__ import annotations

import heapq
from typing import Optional

from reproduce.sizing.estimates import Estimate
from reproduce.sizing.throughput import SizingError
from slurm.launcher import topo_order


def simulate(jobs, est: dict[str, Estimate], cluster_nodes: Optional[int] = None) -> dict:
    """Start and end hours of every job when the plan runs on `cluster_nodes` nodes (None: as many as it
    wants): ready jobs start in the plan's order as soon as their dependencies have ended and their nodes are
    free (jobs that fit side by side run in parallel; a CPU job takes no node). A `wait_checkpoint` job ends
    when the job it watches is that fraction through. Returns {"start", "end", "makespan", "path",
    "peak_nodes"} (`path`: the chain of jobs that determined the last end; `peak_nodes`: the most nodes in
    use at once)."""
    order = topo_order(jobs)
    by = {j.key: j for j in order}
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    why: dict[str, Optional[str]] = {}
    free = cluster_nodes if cluster_nodes is not None else 10 ** 9
    for j in order:
        if est[j.key].nodes > free and cluster_nodes is not None:
            raise SizingError(f"job {j.key} needs {est[j.key].nodes} nodes; the cluster has {cluster_nodes} "
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
                raise SizingError(f"cannot schedule {pending[0].key}")
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

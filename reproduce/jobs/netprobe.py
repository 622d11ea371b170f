"""The pilot's two-node network probe (`python -m reproduce.jobs net-probe`, job `pilot/net`): a short
all-gather over every rank of two nodes at the message sizes a training step moves, its bandwidth printed and
written to runs/<preset>/pilot/net.json with the transport NCCL chose; below the floor the job fails, so the
pilot stops before the matrix is sized on a network that would make every step slower.

    torchrun --nnodes 2 --nproc_per_node 8 ... -m reproduce.jobs net-probe --preset P --root R
             [--floor-gbps X] [--sizes-mb 1,4]          (the sizes: tests on CPU, gloo)

The pilot itself runs on one node (NVLink), so it cannot see the network between nodes: when NCCL finds no
InfiniBand/RoCE/EFA it falls back to sockets (`NET/Socket`) and nothing fails, only every FSDP2 all-gather
and reduce-scatter of a multi-node step gets slower. The probe sets NCCL_DEBUG=INFO (subsystems INIT,NET)
into a file per rank before the process group starts and reads the transport back from it (`nccl_transport`);
on CPU (gloo) the transport is TCP.

Bandwidth, as nccl-tests reports it: algbw = total bytes / seconds, busbw = algbw x (W - 1) / W for an
all-gather of W ranks (what each rank's link carries). The floor applies to the busbw of the largest size.
"""
from __future__ import annotations

import datetime
import os
import re
import socket
import time
from pathlib import Path
from typing import Optional

from common.jsonl import write_json_atomic
from reproduce.matrix.presets import STATE_JSON, Preset, preset_root

NET_FILE = "net.json"
# busbw floor (GB/s, 1e9 bytes) of the largest message: assumed. A socket fallback on 100 GbE gives at most
# ~12 GB/s; InfiniBand HDR/NDR with a NIC per GPU gives several times this floor
FLOOR_GBPS = 20.0
WARMUP, ITERS = 2, 5
FALLBACK_SIZES = (64 * 2 ** 20, 512 * 2 ** 20)   # bytes, when the model's shape is unknown
# NCCL's INFO lines naming the network plug-in it uses: `NET/IB : Using [0]mlx5_0:1/IB ...`, `NET/Socket :
# Using [0]eth0:...`, `NET/OFI Selected provider is efa`, and its `Using network IB|Socket|...`
_NET_RE = re.compile(r"(?:Using network (\w+))|(?:NET/(AWS Libfabric|\w+)\s*:?\s*(?:Using|Selected))")


def message_sizes(preset: Preset) -> list[int]:
    """Bytes of the collectives a step moves, smallest first: one decoder layer's parameters in the compute
    dtype (FSDP2 gathers a layer at a time, forward and backward) and the embedding matrix (the root's
    gather and the largest tensor of a weight push into vLLM); FALLBACK_SIZES for an unknown model."""
    from armor import memory
    shape = memory.model_shape(preset.cfg.model.path)
    if shape is None:
        return list(FALLBACK_SIZES)
    b = memory.BYTES[preset.cfg.parallel.compute_dtype]
    return sorted({shape.layer_params * b, shape.vocab * shape.hidden * b})


def node_name() -> str:
    """This rank's node: SLURM's name for it (SLURMD_NODENAME; nodes that share a host name, as network
    namespaces do, stay apart), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def nccl_transport(text: str) -> Optional[str]:
    """The network NCCL used, from its NCCL_DEBUG=INFO output (IB, Socket, OFI, ...), or None when the
    output names none (one node: NVLink/shared memory only)."""
    found = None
    for m in _NET_RE.finditer(text):
        found = m.group(1) or m.group(2)
    return found


def bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of an all-gather of `nbytes` in all over `world` ranks taking `seconds`."""
    alg = nbytes / seconds / 1e9
    return alg, alg * (world - 1) / world


def probe(sizes: list[int], warmup: int = WARMUP, iters: int = ITERS) -> list[dict]:
    """Time an all-gather of each size (bytes in all: each rank contributes size / W) in the process group
    already started; every rank calls it. Returns one row per size: bytes, seconds (mean of iters),
    algbw_gbps, busbw_gbps."""
    import torch
    import torch.distributed as dist
    world = dist.get_world_size()
    dev = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
           else torch.device("cpu"))
    rows = []
    for size in sizes:
        chunk = max(1, size // world)
        mine = torch.full((chunk,), dist.get_rank() % 256, dtype=torch.uint8, device=dev)
        out = torch.empty(chunk * world, dtype=torch.uint8, device=dev)
        for i in range(warmup + iters):
            if i == warmup:
                _sync(dev)
                dist.barrier()
                t0 = time.perf_counter()
            dist.all_gather_into_tensor(out, mine)
        _sync(dev)
        t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)         # the slowest rank's: one verdict on every rank
        s = float(t.item())
        alg, bus = bandwidth(chunk * world, s, world)
        rows.append({"bytes": chunk * world, "seconds": s, "algbw_gbps": alg, "busbw_gbps": bus})
        if out[chunk * (world - 1)].item() != (world - 1) % 256:
            raise RuntimeError("net-probe: the all-gather returned wrong data")
        del mine, out
    return rows


def _sync(dev) -> None:
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def verdict(rows: list[dict], floor_gbps: float) -> tuple[bool, str]:
    """Whether the largest size's busbw reaches the floor, and the line saying so."""
    top = max(rows, key=lambda r: r["bytes"])
    ok = top["busbw_gbps"] >= floor_gbps
    return ok, (f"busbw {top['busbw_gbps']:.2f} GB/s at {top['bytes'] / 2 ** 20:.0f} MiB "
                f"{'>=' if ok else '<'} the floor {floor_gbps:g} GB/s")


def cmd_net_probe(preset: Preset, root: Path, floor_gbps: float = FLOOR_GBPS,
                  sizes: Optional[list[int]] = None) -> int:
    """The job: start the process group (nccl on GPUs, gloo else) with NCCL's log in a file per rank, probe
    (`sizes` in bytes; default message_sizes), gather every rank's transport, and (rank 0) print and write
    net.json; exit 1 below the floor."""
    import torch
    import torch.distributed as dist
    out_dir = preset_root(root, preset) / "pilot" / "net"
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.is_available()
    host = node_name()
    log = out_dir / f"nccl.{host}.{os.getpid()}.log"
    if gpu:
        os.environ.setdefault("NCCL_DEBUG", "INFO")
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
        os.environ.setdefault("NCCL_DEBUG_FILE", str(log))
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if gpu else "gloo", timeout=datetime.timedelta(seconds=600))
    try:
        rows = probe(sizes or message_sizes(preset))
        path = Path(os.environ.get("NCCL_DEBUG_FILE", str(log)))
        if gpu:
            text = path.read_text(errors="replace") if path.is_file() else ""
            mine = nccl_transport(text) or "none named (NCCL_DEBUG output had no NET line)"
            mine = f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}: {mine}"
        else:
            mine = "gloo: TCP"
        every: list = [None] * dist.get_world_size()
        dist.all_gather_object(every, [host, mine])
    finally:
        world = dist.get_world_size()
        rank = dist.get_rank()
        dist.destroy_process_group()
    hosts = sorted({h for h, _ in every})
    transports = sorted({t for _, t in every})
    ok, line = verdict(rows, floor_gbps)
    if rank == 0:
        for r in rows:
            print(f"net-probe: all-gather {r['bytes'] / 2 ** 20:9.1f} MiB over {world} ranks on {len(hosts)} "
                  f"node(s): {r['seconds'] * 1e3:9.2f} ms, algbw {r['algbw_gbps']:.2f} GB/s, busbw "
                  f"{r['busbw_gbps']:.2f} GB/s")
        print(f"net-probe: transport {'; '.join(transports)}")
        write_json_atomic(preset_root(root, preset) / "pilot" / NET_FILE,
                          {"world": world, "hosts": hosts, "transport": transports, "sizes": rows,
                           "floor_gbps": floor_gbps, "ok": ok, "verdict": line}, **STATE_JSON)
        print(f"net-probe: {line}")
        if not ok:
            print(f"error: net-probe: {line}: NCCL uses {'; '.join(transports)}; check that NCCL finds the "
                  "fast network (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, the OFI/EFA plug-in; runs/<preset>/pilot/"
                  "net/nccl.*.log), or, where this network is what there is, rerun the pilot with "
                  "--net-floor-gbps lower")
    return 0 if ok else 1

"""Pre-flight: what stops a paper-scale run on some clusters, checked before any job is submitted (and printed
by the dry run), each failure naming its fix; a failed check stops the submission.

    facts = gather_facts(root, env)                         # what this host sees (or injected: tests)
    checks = run_checks(preset, res, jobs, est, facts)      # [Check(name, status, detail)]
    print("\n".join(check_lines(checks, facts)))

The checks (status "ok", "FAIL", or "not checked here" with the reason):
  driver         the NVIDIA driver the GPU wheels' CUDA needs (NVIDIA's CUDA release notes, "CUDA Toolkit
                 and Corresponding Driver Versions": CUDA 13.x >= 580.65.06, 12.x >= 525.60.13); read with
                 nvidia-smi where one answers: the submission host when it has a GPU, else the first thing
                 each GPU job does (`node_checks`, before any model loads)
  alloc_conf     PYTORCH_CUDA_ALLOC_CONF without expandable_segments:True: vLLM's sleep mode allocates from a
                 memory pool and refuses it at start (vllm/device_allocator/cumem.py asserts "Expandable
                 segments are not compatible with memory pool")
  compile_cache  vLLM's, Triton's, FlashInfer's and torch's extension caches not on a network file system
                 (a shared $HOME over NFS, Lustre, GPFS ...): every rank compiles into them at once
  disk           free space under the run folder for the checkpoints the plan keeps
                 (reproduce/sizing/estimates.py's volume of the jobs still to run)
  vllm_share     the training state a rank holds while vLLM generates (its shards of the fp32 masters,
                 AdamW's moments and πref: armor/memory.py at the run's world size) plus
                 rollout.gpu_memory_utilization of a GPU fit in a GPU (a run shrunk to fewer nodes, or the
                 one-node pilot, holds larger shards); needs the GPU's memory: nvidia-smi, or --gpu-mem-gb.
                 The margin left is printed; under SHARE_SLACK_GIB it warns with the largest
                 gpu_memory_utilization that leaves SHARE_SLACK_GIB
  python         vLLM 0.33 needs Python >= 3.11 (pyproject's `gpu` extra installs it only there)
  hf_token       a token ($HF_TOKEN or `huggingface-cli login`) where a hub item still to fetch is gated
  hub_access     where the `fetch` job fetches from: the mirror (ARMOR_HUB_MIRROR, checked here), or the
                 hub from a compute node (not checked here: fetch on a host with access first, or mirror)

`ARMOR_PREFLIGHT_FACTS` (a JSON file of Facts fields) replaces what gather_facts found: the tests inject
facts through it, so each check's logic runs on CPU.
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import socket
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

FACTS_ENV = "ARMOR_PREFLIGHT_FACTS"
OK, FAIL, NOT_CHECKED, WARN = "ok", "FAIL", "not checked here", "warn"     # WARN does not stop a submission
# the CUDA of the GPU wheels (constraints/gpu.txt: torch 2.14.0's default wheels are CUDA 13 builds) when the
# interpreter here is a CPU build
GPU_WHEEL_CUDA = "13.0"
# the oldest driver each CUDA major runs on (NVIDIA CUDA Toolkit release notes, Table 3)
MIN_DRIVER = {13: "580.65.06", 12: "525.60.13"}
NETWORK_FS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "fuse.ceph",
              "glusterfs", "fuse.glusterfs", "fuse.sshfs", "wekafs", "orangefs", "panfs", "pvfs2", "afs",
              "9p", "fuse.juicefs", "fuse.s3fs"}
GPU_MARGIN_GIB = 2.0     # the CUDA context, NCCL buffers and the allocator's slack beside the two shares
SHARE_SLACK_GIB = 4.0    # vllm_share warns below this margin left (activation peaks, fragmentation)
MIN_PYTHON_VLLM = (3, 11)


@dataclass
class Facts:
    """What the checks read of the machine; every field may be injected (FACTS_ENV)."""
    env: dict = field(default_factory=dict)          # the jobs' environment (the driver's + the resources')
    home: str = ""
    mounts: list = field(default_factory=list)       # [mount point, file system type] (/proc/mounts)
    free_bytes: Optional[int] = None                 # free under the run folder
    driver: Optional[str] = None                     # nvidia-smi's driver version; None: no GPU here
    gpu_memory_gib: Optional[float] = None           # one GPU's memory (nvidia-smi or --gpu-mem-gb)
    cuda: Optional[str] = None                       # the CUDA the GPU wheels are built for
    python: str = ""                                 # the interpreter's version (the jobs run the same one)
    where: str = "the submission host"


@dataclass
class Check:
    name: str
    status: str
    detail: str


def _nvidia_smi() -> tuple[Optional[str], Optional[float]]:
    """(driver version, the first GPU's memory in GiB) from nvidia-smi, or (None, None) without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None, None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    line = next((x for x in r.stdout.splitlines() if x.strip()), "")
    if r.returncode != 0 or "," not in line:
        return None, None
    drv, mem = (x.strip() for x in line.split(",", 1))
    try:
        return drv, float(mem) / 1024.0          # MiB
    except ValueError:
        return drv, None


def _mounts() -> list:
    try:
        rows = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    return [[r.split()[1], r.split()[2]] for r in rows if len(r.split()) >= 3]


def _free_under(path: Path) -> Optional[int]:
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def _cuda_here() -> str:
    try:
        import torch
        return torch.version.cuda or GPU_WHEEL_CUDA
    except ImportError:
        return GPU_WHEEL_CUDA


def gather_facts(root: Path, env: Optional[dict] = None, gpu_mem_gb: Optional[float] = None,
                 where: str = "the submission host") -> Facts:
    """This host's facts (the jobs' environment `env`, default os.environ), then FACTS_ENV's overrides."""
    drv, mem = _nvidia_smi()
    f = Facts(env=dict(os.environ if env is None else env), home=os.path.expanduser("~"), mounts=_mounts(),
              free_bytes=_free_under(root), driver=drv,
              gpu_memory_gib=gpu_mem_gb * 1e9 / 2 ** 30 if gpu_mem_gb else mem,
              cuda=_cuda_here() if drv is not None else GPU_WHEEL_CUDA,     # torch loads only on a GPU host
              python=platform.python_version(),
              where=where if drv is None else f"{where} ({socket.gethostname()}, a GPU)")
    inject = os.environ.get(FACTS_ENV)
    if inject:
        known = {x.name for x in fields(Facts)}
        for k, v in json.loads(Path(inject).read_text()).items():
            if k not in known:
                raise ValueError(f"{FACTS_ENV}: {inject} has an unknown field {k!r} (known: {sorted(known)})")
            setattr(f, k, v)
    return f


# ------------------------------------------------------------------------------------------- the checks
def _version(v: str) -> tuple:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def check_driver(f: Facts) -> Check:
    """The driver against the CUDA the GPU wheels need."""
    if f.driver is None:
        return Check("driver", NOT_CHECKED, f"no GPU on {f.where}: each GPU job checks it first")
    major = int(str(f.cuda or GPU_WHEEL_CUDA).split(".")[0])
    need = MIN_DRIVER.get(major)
    if need is None:
        return Check("driver", NOT_CHECKED, f"no driver floor known for CUDA {f.cuda}")
    if _version(f.driver) < _version(need):
        return Check("driver", FAIL, f"NVIDIA driver {f.driver} is older than the {need} the CUDA {major} "
                                     f"wheels need: update the driver, or install the GPU wheels of an "
                                     f"older CUDA (constraints/gpu.txt)")
    return Check("driver", OK, f"driver {f.driver} >= {need} (CUDA {major})")


def check_alloc_conf(f: Facts, engine: str) -> Check:
    conf = f.env.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if engine != "vllm":
        return Check("alloc_conf", OK, f"rollout.engine {engine}: no vLLM sleep mode")
    if "expandable_segments:true" in conf.replace(" ", "").lower():
        return Check("alloc_conf", FAIL, f"PYTORCH_CUDA_ALLOC_CONF={conf!r} sets expandable_segments:True, "
                                         "which vLLM's sleep mode refuses at start: unset it (or drop "
                                         "expandable_segments) in the environment and the resources file's "
                                         "env:")
    return Check("alloc_conf", OK, "PYTORCH_CUDA_ALLOC_CONF " + (repr(conf) if conf else "unset"))


def cache_dirs(env: dict, home: str) -> dict[str, str]:
    """{variable: the folder it names, or its default} of the compile caches the GPU jobs write."""
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    user = env.get("USER", "user")
    return {"VLLM_CACHE_ROOT": env.get("VLLM_CACHE_ROOT") or os.path.join(xdg, "vllm"),
            "TRITON_CACHE_DIR": env.get("TRITON_CACHE_DIR")
            or os.path.join(env.get("TRITON_HOME") or home, ".triton", "cache"),
            "FLASHINFER_WORKSPACE_BASE": env.get("FLASHINFER_WORKSPACE_BASE") or home,
            "TORCH_EXTENSIONS_DIR": env.get("TORCH_EXTENSIONS_DIR") or os.path.join(xdg, "torch_extensions"),
            "TORCHINDUCTOR_CACHE_DIR": env.get("TORCHINDUCTOR_CACHE_DIR") or f"/tmp/torchinductor_{user}"}


def fs_type(path: str, mounts: list) -> Optional[str]:
    """The file system type of the mount holding `path` (the longest mount point above it)."""
    p = os.path.abspath(path)
    best = None
    for point, kind in mounts:
        if p == point or p.startswith(point.rstrip("/") + "/") or point == "/":
            if best is None or len(point) > len(best[0]):
                best = (point, kind)
    return best[1] if best else None


def check_compile_cache(f: Facts, engine: str) -> Check:
    if engine != "vllm":
        return Check("compile_cache", OK, f"rollout.engine {engine}: no vLLM/Triton compile caches")
    if not f.mounts:
        return Check("compile_cache", NOT_CHECKED, "no mount table here (/proc/mounts)")
    shared = {k: (d, fs_type(d, f.mounts)) for k, d in cache_dirs(f.env, f.home).items()}
    bad = {k: v for k, v in shared.items() if v[1] in NETWORK_FS}
    if bad:
        names = ", ".join(f"{k}={d} ({kind})" for k, (d, kind) in bad.items())
        return Check("compile_cache", FAIL,
                     f"compile caches on a network file system: {names}; every rank compiles into them at "
                     f"once: set {', '.join(bad)} to a node-local folder (e.g. /tmp/$USER/...) in the "
                     f"environment or the resources file's env:")
    return Check("compile_cache", OK, "node-local: " + ", ".join(f"{k} ({v[1]})" for k, v in shared.items()))


def check_disk(f: Facts, need_bytes: Optional[int], root: Path) -> Check:
    if need_bytes is None:
        return Check("disk", NOT_CHECKED, "no checkpoint volume estimate for this preset")
    if f.free_bytes is None:
        return Check("disk", NOT_CHECKED, f"free space under {root} unknown")
    from reproduce.sizing.estimates import fmt_bytes
    if f.free_bytes < need_bytes:
        return Check("disk", FAIL, f"{fmt_bytes(f.free_bytes)} free under {root}, the plan keeps "
                                   f"{fmt_bytes(need_bytes)} of checkpoints: free space, put --root on a "
                                   f"larger file system, or keep fewer (schedule.keep_last)")
    return Check("disk", OK, f"{fmt_bytes(f.free_bytes)} free under {root} for {fmt_bytes(need_bytes)}")


def resident_gib(cfg, world_size: int, shape) -> float:
    """GiB a rank holds on its GPU between updates, while vLLM generates: its shards of the policy's
    parameters, AdamW's moments and πref (armor.memory.estimate's parts)."""
    from armor import memory
    est = memory.estimate(cfg, world_size, shape)
    return est["params"] + est["optimizer"] + est["reference"]


def check_vllm_share(f: Facts, cfg, world_size: int, shape, key: str = "train") -> Check:
    if cfg.rollout.engine != "vllm":
        return Check("vllm_share", OK, f"rollout.engine {cfg.rollout.engine}")
    if shape is None:
        return Check("vllm_share", NOT_CHECKED, "model shape unknown (armor/memory.py KNOWN)")
    if f.gpu_memory_gib is None:
        return Check("vllm_share", NOT_CHECKED, f"a GPU's memory unknown on {f.where} (--gpu-mem-gb): each "
                                                f"GPU job checks it first")
    util = cfg.rollout.gpu_memory_utilization
    held = resident_gib(cfg, world_size, shape)
    need = held + util * f.gpu_memory_gib + GPU_MARGIN_GIB
    margin = f.gpu_memory_gib - need
    what = (f"{held:.1f} GiB of training state a rank at {world_size} ranks + {util:g} x "
            f"{f.gpu_memory_gib:.0f} GiB for vLLM + {GPU_MARGIN_GIB:g} GiB")
    suggest = suggested_utilization(held, f.gpu_memory_gib)
    hint = (f"rollout.gpu_memory_utilization={suggest:.2f} leaves {SHARE_SLACK_GIB:g} GiB" if suggest > 0
            else f"no vLLM share leaves {SHARE_SLACK_GIB:g} GiB: run on more nodes (--nodes; {key}.nodes)")
    if margin < 0:
        return Check("vllm_share", FAIL, f"{what} = {need:.1f} GiB > a GPU's {f.gpu_memory_gib:.0f} GiB: "
                                         f"{hint}, or run on more nodes (--nodes; {key}.nodes)")
    if margin < SHARE_SLACK_GIB:
        return Check("vllm_share", WARN, f"{what} = {need:.1f} GiB <= {f.gpu_memory_gib:.0f} GiB, margin "
                                         f"{margin:.1f} GiB (< {SHARE_SLACK_GIB:g}): {hint}")
    return Check("vllm_share", OK, f"{what} = {need:.1f} GiB <= {f.gpu_memory_gib:.0f} GiB, margin "
                                   f"{margin:.1f} GiB")


def suggested_utilization(held_gib: float, gpu_gib: float) -> float:
    """The largest rollout.gpu_memory_utilization (two decimals, rounded down) that leaves SHARE_SLACK_GIB
    beside `held_gib` of training state and GPU_MARGIN_GIB on a GPU of `gpu_gib`; <= 0 when none does."""
    return math.floor(100 * (gpu_gib - held_gib - GPU_MARGIN_GIB - SHARE_SLACK_GIB) / gpu_gib) / 100


def check_python(f: Facts, engine: str) -> Check:
    """vLLM 0.33 (the `gpu` extra) needs Python >= 3.11; pyproject's marker installs no vLLM below it."""
    if engine != "vllm":
        return Check("python", OK, f"rollout.engine {engine}: no vLLM")
    if not f.python:
        return Check("python", NOT_CHECKED, "the interpreter's version unknown")
    need = ".".join(map(str, MIN_PYTHON_VLLM))
    if _version(f.python)[:2] < MIN_PYTHON_VLLM:
        return Check("python", FAIL, f"Python {f.python} on {f.where}: vLLM 0.33 needs >= {need} (the `gpu` "
                                     f"extra installs no vLLM below it): make the GPU venv with Python "
                                     f">= {need} (README, GPU set-up)")
    return Check("python", OK, f"Python {f.python} >= {need}")


def check_hub(items: list, where: str) -> list[Check]:
    """hf_token and hub_access of the hub items the `fetch` job still has to copy (reproduce.hub.Item)."""
    from reproduce import hub
    todo = [it for it in items if not it.done()]
    if not todo:
        line = "nothing to fetch" if not items else f"all {len(items)} hub item(s) fetched"
        return [Check("hf_token", OK, line), Check("hub_access", OK, line)]
    gated = [it.label() for it in todo if it.gated]
    m = hub.mirror()
    have = "set" if hub.token() else "not set"
    if m is not None:
        token = Check("hf_token", OK, f"{hub.TOKEN_ENV} {have}; the mirror {m} serves every item")
    elif gated and not hub.token():
        token = Check("hf_token", FAIL, f"{', '.join(gated)} gated and no token: set {hub.TOKEN_ENV} (an "
                                        f"account that accepted its terms), `huggingface-cli login`, or "
                                        f"{hub.MIRROR_ENV}")
    else:
        token = Check("hf_token", OK, f"{hub.TOKEN_ENV} {have}" + (f" (gated: {', '.join(gated)})" if gated
                                                                   else " (no gated item)"))
    try:
        if m is not None:
            hub.check_ready(todo)        # the mirror holds every item (the token is hf_token's)
    except hub.FetchError as e:
        access = Check("hub_access", FAIL, str(e))
    else:
        access = (Check("hub_access", OK, f"{hub.MIRROR_ENV}={m} holds the {len(todo)} item(s) to fetch")
                  if m is not None else
                  Check("hub_access", NOT_CHECKED,
                        f"the `fetch` job fetches {len(todo)} item(s) from the hub on a compute node, which "
                        f"{where} cannot test: where compute nodes have no internet, run the fetch job "
                        f"here first (python -m reproduce.jobs fetch --preset P --root R --fetch-dir D), "
                        f"or set {hub.MIRROR_ENV} to a folder holding them"))
    return [token, access]


def run_checks(preset, res: dict, jobs, est: Optional[dict], facts: Facts, root: Path,
               items: Optional[list] = None, pilot_bytes: Optional[int] = None) -> list[Check]:
    """Every check of a plan (GPU presets; a CPU preset's plan: the disk only, when sized). items: the hub
    items of the plan (reproduce.hub.items). pilot_bytes: a pilot's plan, whose checkpoints these are
    (reproduce.dag.pilot_graph.pilot_disk_bytes) and whose ranks are one node's."""
    from armor import memory
    cfg = preset.cfg
    train = res["train"]
    need = pilot_bytes
    if est and pilot_bytes is None:
        need = sum(est[j.key].ckpt_bytes for j in jobs if j.kind == "train" and j.key in est
                   and not j.is_done()) or None
    out = [check_disk(facts, need, root)]
    hub_checks = check_hub(items, facts.where) if items is not None else []
    if not train.gpus_per_node:
        return out + hub_checks
    shape = memory.model_shape(cfg.model.path)
    world = train.ranks_per_node if pilot_bytes is not None else train.world_size
    return [check_driver(facts), check_python(facts, cfg.rollout.engine),
            check_alloc_conf(facts, cfg.rollout.engine), check_compile_cache(facts, cfg.rollout.engine),
            *out, check_vllm_share(facts, cfg, world, shape), *hub_checks]


def check_lines(checks: list[Check], facts: Facts) -> list[str]:
    out = [f"pre-flight (on {facts.where}):"]
    out += [f"  [{c.status}] {c.name}: {c.detail}" for c in checks]
    return out


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]


def node_checks(cfg, world_size: int, env: Optional[dict] = None) -> list[Check]:
    """What a GPU job checks first, on its node (before any model loads): the driver, the allocator's
    configuration and vLLM's share of this node's GPUs; [] on a machine without nvidia-smi (a CPU job)."""
    from armor import memory
    f = gather_facts(Path("."), env, where="this node")
    if f.driver is None:
        return []
    return [check_driver(f), check_alloc_conf(f, cfg.rollout.engine),
            check_vllm_share(f, cfg, world_size, memory.model_shape(cfg.model.path))]

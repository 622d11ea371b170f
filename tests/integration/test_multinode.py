"""A real multi-node launch on one machine (marker `multinode`, not in the default run):

    bash slurm/cluster_netns_up.sh && .venv/bin/python -m pytest -m multinode

SLURM with two nodes that are network namespaces (armor-n1 10.77.0.1, armor-n2 10.77.0.2 on a bridge; see the
script) runs a 2-node x 1-rank torchrun train job of the smoke preset through the launcher: torchrun's
rendezvous on the first node's address, gloo over the veth pairs (GLOO_SOCKET_IFNAME=armor0). The job is held
right after its step-2 checkpoint (ARMOR_HOLD, armor/faults.py), requeued there with `scontrol requeue`, and
must resume from that checkpoint and end equal to one process over the same 2 rollout shards
(tests/integration/test_distributed.py's reference and tolerances)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.jsonl import read_jsonl
from slurm.launcher import DONE, Job, Launcher, active_jobs
from slurm.resources import Resources
from test_distributed import ARGS, SMOKE, STEPS, _ok, _run, _same   # the 2-rank run and its reference

pytestmark = pytest.mark.multinode
ROOT = Path(__file__).resolve().parents[2]
CONF = Path(os.environ.get("ARMOR_NETNS_CONF", "/etc/armor-netns/slurm.conf"))
NODES = ["armor-n1", "armor-n2"]
UP = "bash slurm/cluster_netns_up.sh"


@pytest.fixture(scope="module")
def netns_cluster():
    """The namespace cluster answers, both nodes take jobs and nothing else is queued; SLURM_CONF points the
    launcher's sbatch/squeue/scontrol at it for this module."""
    if not CONF.is_file():
        pytest.skip(f"no {CONF}: start the namespace cluster with {UP}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(CONF)
    try:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20)
        states = dict(line.split()[:2] for line in r.stdout.splitlines() if line.strip())
        if r.returncode != 0 or sorted(states) != NODES:
            pytest.fail(f"the namespace cluster does not answer with nodes {NODES} ({r.stdout.strip()} "
                        f"{r.stderr.strip()}); run: {UP}", pytrace=False)
        bad = {n: s for n, s in states.items() if s.rstrip("*~#!%$@^-") not in ("idle", "mixed", "allocated")}
        if bad:
            pytest.fail(f"namespace nodes not usable: {bad}; run: {UP}", pytrace=False)
        others = active_jobs()
        if others:
            pytest.fail(f"the namespace cluster's queue holds {len(others)} job(s) (first: {others[0]!r})",
                        pytrace=False)
        yield
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _unless_failed(jdir: Path, cond):
    """cond, failing the test at once when the job's wrapper reports a failure (with the logs' ends)."""
    def check():
        if (jdir / "failed").exists():
            tails = [f"{p.name}:\n{p.read_text()[-3000:]}" for p in sorted(jdir.glob("log*.err"))]
            pytest.fail("the 2-node job failed\n" + "\n".join(tails))
        return cond()
    return check


@pytest.mark.timeout(1800)
def test_two_node_torchrun_job_requeued_resumes_and_equals_one_process(netns_cluster, world, tmp_path,
                                                                          wait_until):
    out, hold = tmp_path / "run", tmp_path / "hold"
    hold.mkdir()
    argv = [sys.executable, "-m", "armor.train", "--config", str(SMOKE), f"model.path={world / 'base_model'}",
            "data.train=" + str(world / "data" / "train.jsonl"),
            f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]", f"output_dir={out}",
            f"schedule.total_steps={STEPS}", "parallel.timeout_s=600", *ARGS]
    env = {"ARMOR_PROGRESS": "0", "GLOO_SOCKET_IFNAME": "armor0", "ARMOR_HOLD": f"saved@2:{hold}"}
    job = Job("stage1/multinode", argv, kind="train", env=env, launch="torchrun",
              resources=Resources(nodes=2, procs_per_node=1, cpus_per_task=1, time_min=60),
              done=lambda: (out / "DONE").exists())
    la = Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5, log=lambda s: None)
    la.run([job], wait=False)
    jid = la.load_registry()[job.key]["job_id"]
    jdir = la.job_dir(job.key)

    # attempt 1: held after its step-2 checkpoint (rank 0 in the hold, rank 1 at the barrier behind it)
    wait_until(_unless_failed(jdir, (hold / "held").exists), "the job held after its step-2 checkpoint")
    ck2 = out / "checkpoints" / f"step_{2:06d}"
    assert ck2.is_dir() and not (out / "DONE").exists()
    before = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in before] == [1, 2]
    stamp = {p.name: p.stat().st_mtime_ns for p in ck2.iterdir()}
    subprocess.check_call(["scontrol", "requeue", jid])
    wait_until(_unless_failed(jdir, lambda: len((jdir / "attempts.jsonl").read_text().splitlines()) == 2),
               "the requeued job's second attempt")
    (hold / "release").write_text("")    # only for a second attempt that would (wrongly) start from step 0

    states = Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5,
                      log=lambda s: None).run([job])
    assert states[job.key][0] == DONE
    assert la.load_registry()[job.key]["job_id"] == jid        # requeued, not resubmitted

    # two nodes: each attempt ran node 0 on armor-n1 and node 1 on armor-n2, torchrun across them
    show = subprocess.run(["scontrol", "show", "job", jid], capture_output=True, text=True).stdout
    assert "NodeList=armor-n[1-2]" in show and "NumNodes=2" in show, show
    wait_until((jdir / "finished").exists, "the wrapper's finished marker")
    attempts = [json.loads(x) for x in (jdir / "attempts.jsonl").read_text().splitlines()]
    assert [(a["attempt"], a["node"], a["node_rank"]) for a in attempts] == [(1, "armor-n1", 0),
                                                                                 (2, "armor-n1", 0)]
    log0, log1 = (jdir / "log.out").read_text(), (jdir / "log.node1.out").read_text()
    for log, node in ((log0, "armor-n1"), (log1, "armor-n2")):
        headers = [x for x in log.splitlines() if x.startswith("=== ") and " attempt " in x]
        assert len(headers) == 2 and all(f"(node {node})" in h for h in headers), headers
        assert all("--nnodes=2" in h and "--nproc_per_node=1" in h and "--master_addr=armor-n1" in h
                   for h in headers), headers
    # attempt 1 ends with no line of its own when SLURM's SIGKILL (KillWait 5 s here) comes first: armor.train
    # takes the requeue's SIGTERM as a stop request for the next step boundary (armor/stop.py), and it is held
    assert log0.count("(finished)") == 1, log0[-2000:]

    # resumed from the step-2 checkpoint: steps 1-2 not recomputed (their rows, timings included, and the
    # checkpoint's files are attempt 1's), steps 3-4 computed by attempt 2
    after = (out / "metrics.jsonl").read_text().splitlines()
    assert after[:2] == before and [json.loads(x)["step"] for x in after] == [1, 2, 3, 4]
    assert {p.name: p.stat().st_mtime_ns for p in ck2.iterdir()} == stamp
    assert len(list(out.glob("DONE*"))) == 1

    # the result equals one process over the same 2 rollout shards (test_distributed.py's tolerances)
    one = tmp_path / "one"
    _ok(_run(world, one, 1))
    _same(one, out)
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == list(range(1, STEPS + 1))


@pytest.mark.timeout(900)
def test_the_network_probe_across_the_two_nodes(netns_cluster, tmp_path, wait_until):
    """The pilot's network probe (reproduce/jobs/netprobe.py) as a 2-node x 1-rank torchrun job through the
    launcher: an all-gather between armor-n1 and armor-n2 over gloo (the veth pairs), its bandwidth and
    transport recorded in net.json; a floor no network reaches fails the job."""
    from common.jsonl import read_json

    def probe(floor, name):
        root = tmp_path / name
        argv = [sys.executable, "-m", "reproduce.jobs", "net-probe", "--preset", "tiny", "--root", str(root),
                "--floor-gbps", str(floor), "--sizes-mb", "1,4"]
        net = root / "tiny" / "pilot" / "net.json"
        job = Job(f"pilot/net_{name}", argv, kind="pilot", env={"GLOO_SOCKET_IFNAME": "armor0"},
                  launch="torchrun", resources=Resources(nodes=2, procs_per_node=1, cpus_per_task=1,
                                                         time_min=15),
                  done=lambda: (read_json(net) or {}).get("ok") is True)
        state = Launcher(tmp_path / "jobs", cluster="slurm", progress=False, poll_s=0.5,
                         log=lambda s: None).run([job])[job.key][0]
        return state, read_json(net)
    state, net = probe(0, "open")
    assert state == DONE
    assert net["ok"] and net["world"] == 2 and net["hosts"] == NODES and net["transport"] == ["gloo: TCP"]
    assert all(r["busbw_gbps"] > 0 for r in net["sizes"])
    state, net = probe(1e6, "floor")
    assert state != DONE and net["ok"] is False and net["hosts"] == NODES

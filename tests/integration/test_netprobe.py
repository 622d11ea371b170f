"""The pilot's two-node network probe (reproduce/jobs/netprobe.py): NCCL's transport read from its INFO
lines, the bandwidth arithmetic, and the job itself on 2 gloo ranks (torchrun, CPU): bandwidth printed,
net.json written, a floor above it fails the job; the pilot's graph has the probe when training spans
nodes."""
import json
import subprocess
import sys

import pytest

from reproduce.jobs import netprobe

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_nccl_transport_from_its_info_lines():
    ib = ("host:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so\n"
          "host:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
          "host:1:1 [0] NCCL INFO Using network IB\n")
    assert netprobe.nccl_transport(ib) == "IB"
    sock = ("host:1:1 [0] NCCL INFO NET/IB : No device found.\n"
            "host:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
            "host:1:1 [0] NCCL INFO Using network Socket\n")
    assert netprobe.nccl_transport(sock) == "Socket"
    assert netprobe.nccl_transport("host:1:1 [0] NCCL INFO NET/OFI Selected provider is efa\n") == "OFI"
    done = "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 - Init COMPLETE\n"
    assert netprobe.nccl_transport(done) is None


def test_bandwidth_and_the_floor():
    alg, bus = netprobe.bandwidth(16 * 10 ** 9, 1.0, 16)     # 16 GB in 1 s over 16 ranks
    assert alg == pytest.approx(16.0) and bus == pytest.approx(15.0)
    rows = [{"bytes": 2 ** 20, "busbw_gbps": 1.0}, {"bytes": 2 ** 30, "busbw_gbps": 30.0}]
    assert netprobe.verdict(rows, 20.0)[0] is True                  # the largest message decides
    ok, line = netprobe.verdict(rows, 40.0)
    assert ok is False and "busbw 30.00 GB/s at 1024 MiB < the floor 40 GB/s" == line


def _probe(tmp_path, floor):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "reproduce.jobs", "net-probe", "--preset", "tiny", "--root", str(tmp_path), "--floor-gbps",
           str(floor), "--sizes-mb", "1,4"]
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_the_probe_on_two_gloo_ranks_prints_bandwidth_and_fails_below_its_floor(tmp_path):
    r = _probe(tmp_path, 0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("net-probe: all-gather") == 2 and "over 2 ranks on 1 node(s)" in r.stdout
    assert "net-probe: transport gloo: TCP" in r.stdout
    net = json.loads((tmp_path / "tiny" / "pilot" / "net.json").read_text())
    assert net["ok"] is True and net["world"] == 2 and net["transport"] == ["gloo: TCP"]
    assert [x["bytes"] for x in net["sizes"]] == [2 ** 20, 4 * 2 ** 20]
    assert all(x["busbw_gbps"] > 0 for x in net["sizes"])
    r = _probe(tmp_path, 1e6)                                          # no network reaches 1 PB/s
    assert r.returncode != 0 and "error: net-probe: busbw" in r.stdout and "--net-floor-gbps" in r.stdout
    assert json.loads((tmp_path / "tiny" / "pilot" / "net.json").read_text())["ok"] is False


def test_the_pilot_of_a_multi_node_plan_probes_the_network_first(tmp_path):
    from reproduce.dag.pilot_graph import pilot_jobs
    from reproduce.dag.resources import preset_resources
    from reproduce.matrix.presets import load_preset
    p7 = load_preset("qwen25-math-7b")
    jobs = {j.key: j for j in pilot_jobs(p7, tmp_path, preset_resources(p7), net_floor_gbps=12.5)}
    net = jobs["pilot/net"]
    assert net.resources.nodes == 2 and net.launch == "torchrun" and net.deps == []
    assert "--floor-gbps 12.5" in " ".join(map(str, net.argv)) and "pilot/net" in jobs["pilot/report"].deps
    one = preset_resources(p7, None, {"nodes": 1})
    assert "pilot/net" not in {j.key for j in pilot_jobs(p7, tmp_path, one)}   # one node: no network

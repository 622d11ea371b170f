"""The launcher without SLURM: resources, rank commands, DAG order, the local backend and its bookkeeping
(idempotent reruns, failures, stale markers, a killed or interrupted driver)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reproduce.dag.resources import load_resources
from slurm import jobwrap
from slurm.launcher import (BLOCKED, DONE, FAILED, RUNNING, TODO, Gate, Job, Launcher, LauncherError,
                            detect_cluster, topo_order)
from slurm.resources import ResourceError, Resources, resolve_resources

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


# ------------------------------------------------------------------------------------------ resources
def test_resources_from_protocol_yaml_and_flags(tmp_path):
    r = load_resources(nodes=16, gpus_per_node=8)
    assert (r["train"].nodes, r["train"].gpus_per_node, r["train"].cpus_per_task) == (16, 8, 64)
    # evaluation takes a node and splits the benchmarks over its GPUs (torchrun ... -m eval.evaluate)
    assert r["evaluate"].gpus_per_node == 8 and r["collect"].gpus_per_node == 0
    assert r["train"].threads_per_rank == 8 and r["train"].mem_gb is None     # no estimate given: the default
    r = load_resources(nodes=2, gpus_per_node=8, cpus_per_node=96,
                       host_mem_gb={"train": 230, "evaluate": 190})
    assert (r["train"].cpus_per_task, r["train"].threads_per_rank, r["train"].mem_gb) == (96, 12, 230)
    assert (r["evaluate"].cpus_per_task, r["evaluate"].mem_gb) == (96, 190)
    cpu = load_resources(nodes=1, gpus_per_node=0)
    assert all(x.gpus_per_node == 0 and x.nodes == 1 for x in cpu.values())
    f = tmp_path / "res.yaml"
    f.write_text("partition: gpu\naccount: proj\n"
                 "evaluate: {partition: eval}\nextra: {reservation: armor}\n"
                 "env: {NCCL_SOCKET_IFNAME: ib0}\ntrain: {nodes: 2, time_min: 2880, env: {NCCL_DEBUG: "
                 "WARN}}\n")
    r = load_resources(16, 8, f, {"qos": "high", "nodes": 4, "constraint": None})
    assert r["train"].nodes == 4 and r["train"].time_min == 2880 and r["train"].partition == "gpu"
    assert r["evaluate"].partition == "eval" and r["evaluate"].account == "proj"
    assert all(x.qos == "high" for x in r.values()) and r["figures"].extra == {"reservation": "armor"}
    assert r["figures"].env == {"NCCL_SOCKET_IFNAME": "ib0"}
    assert r["train"].env == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}
    f.write_text("trian: {nodes: 2}\n")
    with pytest.raises(ResourceError, match="trian"):
        load_resources(1, 0, f)
    f.write_text("train: {gpus: 2}\n")
    with pytest.raises(ResourceError, match="gpus"):
        load_resources(1, 0, f)
    with pytest.raises(ResourceError, match="nodes"):
        load_resources(1, 0, None, {"nodes": 0})


def test_resources_table_is_the_callers():
    """slurm/resources.py knows no job kinds: the table's keys are the caller's, the YAML file and the flags
    overlay them (flags other than cluster-wide ones size `flags_kind`)."""
    table = {"build": Resources(cpus_per_task=2), "run": Resources(gpus_per_node=1)}
    r = resolve_resources(table, flags={"partition": "p", "time_min": 5}, flags_kind="run")
    assert set(r) == {"build", "run"} and all(x.partition == "p" for x in r.values())
    assert (r["run"].time_min, r["build"].time_min) == (5, 60) and table["run"].partition is None
    with pytest.raises(ResourceError, match="no kind takes them"):
        resolve_resources(table, flags={"time_min": 5})


def test_rank_command():
    argv = [PY, "-m", "armor.train", "--config", "x.yaml", "seed=1"]
    assert jobwrap.rank_command(argv, 1, 0) == argv
    assert jobwrap.rank_command(argv, 1, 1) == argv
    one = jobwrap.rank_command(argv, 1, 8)
    assert one[:3] == [PY, "-m", "torch.distributed.run"] and "--standalone" in one
    assert "--nproc_per_node=8" in one and one[-5:] == argv[1:]
    many = jobwrap.rank_command(argv, 16, 8, node_rank=3, master_addr="node001", master_port=29600)
    for flag in ("--nnodes=16", "--nproc_per_node=8", "--node_rank=3", "--master_addr=node001",
                 "--master_port=29600"):
        assert flag in many
    assert many[-len(argv) + 1:] == argv[1:]


def test_sbatch_script_from_resources(tmp_path, monkeypatch):
    """The sbatch file submitit writes for a 16x8-GPU training job (no scheduler needed)."""
    import shutil as _sh
    import submitit.slurm.slurm as ss
    real = _sh.which
    monkeypatch.setattr(ss.shutil, "which", lambda n, *a, **k: "/usr/bin/srun" if n == "srun" else real(n))
    la = Launcher(tmp_path, cluster="local", progress=False)
    res = Resources(nodes=16, gpus_per_node=8, cpus_per_task=64, mem_gb=900, time_min=1440, partition="gpu",
                    account="proj", qos="high", constraint="h100", extra={"reservation": "armor"})
    job = Job("stage1/dapo/seed0", [PY, "-m", "armor.train"], resources=res, launch="torchrun")
    ex = la._executor(tmp_path / "sub", job, ["101", "102_3"])
    text = ex._make_submission_file_text("python -u -m submitit.core._submit x", "uid")
    for line in ("--nodes=16", "--gpus-per-node=8", "--cpus-per-task=64", "--ntasks-per-node=1",
                 "--mem=921600M", "--time=1440", "--partition=gpu", "--account=proj", "--qos=high",
                 "--constraint=h100", "--dependency=afterok:101:102_3", "--requeue", "--signal=USR2@90",
                 "--reservation=armor", f"--chdir={REPO}", "--job-name=stage1.dapo.seed0"):
        assert f"#SBATCH {line}" in text, line
    assert "srun" in text and f"export PYTHONPATH={REPO}" in text
    # one node's failed task ends the step's others (no 15 nodes left waiting on NCCL)
    srun = next(x for x in text.splitlines() if x.startswith("srun "))
    assert "--kill-on-bad-exit=1" in srun and "--cpus-per-task=64" in srun


def test_gated_job_is_submitted_held_until_its_path_exists(tmp_path, monkeypatch):
    """A gated job (launcher.Gate) is held (`--hold`) while its path is missing, not once it exists; a gate
    must watch a job of the plan."""
    import shutil as _sh
    import submitit.slurm.slurm as ss
    real = _sh.which
    monkeypatch.setattr(ss.shutil, "which", lambda n, *a, **k: "/usr/bin/srun" if n == "srun" else real(n))
    la = Launcher(tmp_path, cluster="local", progress=False)
    path = tmp_path / "run" / "checkpoints" / "step_000140" / "trainer_state.pt"
    job = Job("ckpt/dapo/seed0/step140", [PY, "-c", "pass"], gate=Gate(str(path), "stage1/dapo/seed0"))

    def script():
        return la._executor(tmp_path / "sub", job, [])._make_submission_file_text("python x", "uid")
    assert "#SBATCH --hold" in script() and "--hold" in la.command_lines(job)["sbatch"]
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    assert "--hold" not in script()
    with pytest.raises(LauncherError, match="watches 'stage1/dapo/seed0', which is no job of the plan"):
        topo_order([job])


def test_wrapper_releases_gates_whose_path_exists_and_cancels_the_rest(tmp_path, monkeypatch):
    """slurm.jobwrap's side of a gate (no scheduler: scontrol and scancel are stand-ins that record their
    arguments): a held job is released once when its path exists; when the command ends, a gate whose path
    never came is cancelled."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("scontrol", "scancel"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >> {calls}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    jd = tmp_path / "job"
    jd.mkdir()
    there, missing = tmp_path / "a" / "trainer_state.pt", tmp_path / "b" / "trainer_state.pt"
    (jd / jobwrap.RELEASES).write_text(json.dumps({"ckpt/a": {"job_id": "11", "path": str(there)},
                                                    "ckpt/b": {"job_id": "12", "path": str(missing)}}))
    logs, released = [], set()
    jobwrap.open_gates(jd, released, logs.append)
    assert not calls.exists() and released == set()                 # nothing exists yet
    there.parent.mkdir()
    there.write_bytes(b"x")
    jobwrap.open_gates(jd, released, logs.append)
    jobwrap.open_gates(jd, released, logs.append)                    # once per id
    assert calls.read_text().splitlines() == ["scontrol release 11"] and released == {"11"}
    jobwrap.close_gates(jd, released, logs.append)
    assert calls.read_text().splitlines() == ["scontrol release 11", "scancel 12"]
    assert "released ckpt/a (slurm 11)" in logs[0] and "cancelled ckpt/b (slurm 12)" in logs[1]


# ------------------------------------------------------------------------------------------ DAG
def test_topo_order_and_errors():
    jobs = [Job("c", ["x"], deps=["a", "b"]), Job("b", ["x"], deps=["a"]), Job("a", ["x"]), Job("d", ["x"])]
    assert [j.key for j in topo_order(jobs)] == ["a", "d", "b", "c"]
    with pytest.raises(LauncherError, match="unknown"):
        topo_order([Job("a", ["x"], deps=["zz"])])
    with pytest.raises(LauncherError, match="duplicate"):
        topo_order([Job("a", ["x"]), Job("a", ["y"])])
    with pytest.raises(LauncherError, match="cycle"):
        topo_order([Job("a", ["x"], deps=["b"]), Job("b", ["x"], deps=["a"])])


def test_detect_cluster(monkeypatch):
    import slurm.launcher as L
    monkeypatch.setattr(L.shutil, "which", lambda n: None)
    assert detect_cluster("auto") == "local"
    assert detect_cluster("slurm") == "slurm"
    with pytest.raises(LauncherError):
        detect_cluster("k8s")


def _no_slurm(tmp_path, monkeypatch):
    """sinfo and sbatch on PATH that cannot reach their controller (a login node with SLURM down)."""
    d = tmp_path / "bin"
    d.mkdir()
    for c in ("sinfo", "sbatch", "squeue"):
        (d / c).write_text(f"#!/bin/sh\necho '{c}: error: Unable to contact slurm controller (connect "
                           f"failure)' >&2\nexit 1\n")
        (d / c).chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")


def test_slurm_that_does_not_answer_is_one_error_before_any_submission(tmp_path, monkeypatch, capsys):
    """`--cluster slurm` where no scheduler answers: a LauncherError naming why, nothing submitted; the driver
    prints it as one line (exit 2), not submitit's traceback."""
    _no_slurm(tmp_path, monkeypatch)
    assert detect_cluster("auto") == "local"
    la = Launcher(tmp_path / "runs", cluster="slurm", progress=False, log=lambda s: None)
    with pytest.raises(LauncherError, match=r"no SLURM scheduler answers here \(sinfo exited 1: sinfo: "
                                            r"error: Unable to contact slurm controller"):
        la.run([Job("a", [PY, "-c", "pass"])])
    assert not (la.job_dir("a") / "spec.json").exists()
    with monkeypatch.context() as m:
        m.setenv("PATH", str(tmp_path / "empty"))
        with pytest.raises(LauncherError, match=r"\(sbatch and sinfo not on PATH\)"):
            la.run([Job("a", [PY, "-c", "pass"])])
    from reproduce import run_all
    from test_experiments import _mini_preset
    rc = run_all.main(["--preset", str(_mini_preset(tmp_path)), "--root", str(tmp_path / "runs"),
                       "--cluster", "slurm", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert [x for x in err.splitlines() if x.startswith("error:")] == [x for x in err.splitlines() if x]
    assert "error: cluster slurm: no SLURM scheduler answers here (sinfo exited 1" in err


# ------------------------------------------------------------------------------------------ local backend
def stamp_job(root, key, deps=(), sleep=0.3, fail=False):
    """A job that records (start, end, ARMOR_THREADS, OMP_NUM_THREADS) in out/<key>.json; done when that
    exists."""
    out = Path(root) / "out" / (key.replace("/", "_") + ".json")
    code = textwrap.dedent(f"""
        import json, os, sys, time
        t0 = time.time(); time.sleep({sleep})
        if {fail!r}: sys.exit(5)
        json.dump([t0, time.time(), os.environ.get('ARMOR_THREADS'), os.environ.get('OMP_NUM_THREADS'),
                   os.getcwd()], open({str(out)!r}, 'w'))
    """)
    return Job(key, [PY, "-c", code], kind="collect", deps=list(deps), done=lambda: out.exists())


def read_stamp(root, key):
    return json.loads((Path(root) / "out" / (key.replace("/", "_") + ".json")).read_text())


def quiet(root, **kw):
    kw.setdefault("workers", 2)
    return Launcher(root, cluster="local", progress=False, poll_s=0.05, log=lambda s: None, **kw)


def test_local_dag_order_parallelism_threads_and_rerun(tmp_path):
    (tmp_path / "out").mkdir()
    jobs = [stamp_job(tmp_path, "a"), stamp_job(tmp_path, "b1", ["a"]), stamp_job(tmp_path, "b2", ["a"]),
            stamp_job(tmp_path, "b3", ["a"]), stamp_job(tmp_path, "z/final", ["b1", "b2", "b3"])]
    la = quiet(tmp_path, workers=2)
    states = la.run(jobs)
    assert all(s == DONE for s, _ in states.values())
    st = {j.key: read_stamp(tmp_path, j.key) for j in jobs}
    assert all(st[k][0] >= st["a"][1] for k in ("b1", "b2", "b3"))
    assert st["z/final"][0] >= max(st[k][1] for k in ("b1", "b2", "b3"))
    # at most 2 at a time
    events = sorted([(v[0], 1) for v in st.values()] + [(v[1], -1) for v in st.values()])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 2
    threads = str(max(1, (os.cpu_count() or 1) // 2))
    assert all(v[2] == threads and v[3] == threads for v in st.values())
    assert all(v[4] == str(REPO) for v in st.values())  # jobs run in the repository root
    # bookkeeping: registry, markers, logs in predictable places
    reg = json.loads((tmp_path / "_jobs" / "state.json").read_text())
    assert set(reg) == {j.key for j in jobs} and all(r["state"] == DONE for r in reg.values())
    d = tmp_path / "_jobs" / "z" / "final"
    assert (d / "finished").exists() and (d / "log.out").exists() and (d / "spec.json").exists()
    # rerun: nothing runs
    logs = []
    la2 = Launcher(tmp_path, cluster="local", progress=False, log=logs.append)
    mtimes = {k: (tmp_path / "out" / (k.replace("/", "_") + ".json")).stat().st_mtime for k in st}
    assert all(s == DONE for s, _ in la2.run(jobs).values())
    assert any("nothing to do" in x for x in logs)
    assert mtimes == {k: (tmp_path / "out" / (k.replace("/", "_") + ".json")).stat().st_mtime for k in st}


def test_local_workers_start_ready_jobs_in_the_callers_order(tmp_path):
    """One worker; b waits for a, c for nothing: the caller lists b before c, so b starts first once a is
    done (topo_order's layers would put c, of the first layer, before b: a short job that unblocks others,
    e.g. the driver's restart point, would wait behind every job of a shallower layer)."""
    (tmp_path / "out").mkdir()
    jobs = [stamp_job(tmp_path, "a", sleep=0), stamp_job(tmp_path, "b", ["a"], sleep=0),
            stamp_job(tmp_path, "c", sleep=0)]
    assert [j.key for j in topo_order(jobs)] == ["a", "c", "b"]
    assert all(s == DONE for s, _ in quiet(tmp_path, workers=1).run(jobs).values())
    st = {k: read_stamp(tmp_path, k) for k in ("a", "b", "c")}
    assert st["a"][1] <= st["b"][0] and st["b"][1] <= st["c"][0]


def test_one_worker_runs_a_job_its_gate_readied_without_stopping(tmp_path):
    """One worker; `next` waits for a gated job (the driver's checkpoint-ready job) that the caller lists
    after it: once `a` has made the gate's path, a pass marks the gated job done by its outputs and starts
    nothing; the driver goes on to start `next` in the same invocation instead of ending with it waiting."""
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "a.json"          # what `a` writes: the gate's path
    gated = Job("ckpt/a", [PY, "-c", "pass"], kind="wait_checkpoint", gate=Gate(str(path), "a"),
                done=lambda: path.exists())
    jobs = [stamp_job(tmp_path, "a", sleep=0), stamp_job(tmp_path, "next", ["ckpt/a"], sleep=0), gated]
    states = quiet(tmp_path, workers=1).run(jobs)
    assert {k: s for k, (s, _) in states.items()} == {"a": DONE, "ckpt/a": DONE, "next": DONE}
    assert read_stamp(tmp_path, "next")


def test_local_failure_blocks_dependents_and_rerun_retries(tmp_path):
    (tmp_path / "out").mkdir()
    jobs = [stamp_job(tmp_path, "a"), stamp_job(tmp_path, "bad", ["a"], fail=True),
            stamp_job(tmp_path, "after", ["bad"]), stamp_job(tmp_path, "other", ["a"])]
    la = quiet(tmp_path)
    states = la.run(jobs)
    assert states["a"][0] == DONE and states["other"][0] == DONE
    assert states["bad"][0] == FAILED and "exit 5" in states["bad"][1]
    assert states["after"][0] == BLOCKED
    assert json.loads((la.job_dir("bad") / "failed").read_text())["rc"] == 5
    assert not (la.job_dir("after") / "spec.json").exists()
    # fixed command: the rerun retries only what is not done
    jobs[1] = stamp_job(tmp_path, "bad", ["a"])
    a_mtime = (tmp_path / "out" / "a.json").stat().st_mtime
    states = quiet(tmp_path).run(jobs)
    assert all(s == DONE for s, _ in states.values())
    assert (tmp_path / "out" / "a.json").stat().st_mtime == a_mtime
    assert len((la.job_dir("bad") / "attempts.jsonl").read_text().splitlines()) == 2


def test_finished_marker_of_an_older_submission_is_ignored(tmp_path):
    (tmp_path / "out").mkdir()
    job = Job("j", [PY, "-c", "pass"], kind="collect")  # no done check: markers decide
    la = quiet(tmp_path)
    assert la.run([job])["j"][0] == DONE
    la.load_registry()
    la._record("j", submission="another")  # as if resubmitted since
    la.save_registry()
    assert quiet(tmp_path).states([job])["j"][0] == TODO
    # a finished command whose outputs are missing is a failure, not done
    out = tmp_path / "never"
    job2 = Job("k", [PY, "-c", "pass"], kind="collect", done=lambda: out.exists())
    st = quiet(tmp_path).run([job2])["k"]
    assert st[0] == FAILED and "outputs are missing" in st[1]


def test_missing_command_fails_cleanly(tmp_path):
    st = quiet(tmp_path).run([Job("x", ["/nonexistent/bin/tool"], kind="collect")])["x"]
    assert st[0] == FAILED and "127" in st[1]


def test_second_driver_is_refused(tmp_path):
    la = quiet(tmp_path)
    with la.lock():
        with pytest.raises(LauncherError, match="another driver"):
            with quiet(tmp_path).lock():
                pass


# ------------------------------------------------------------------------------------------ killed drivers
# a resumable counter that checkpoints each step and holds at step HOLD until the file `release` beside its
# work folder exists: the test acts on the jobs while they are held, never racing their progress
HOLD = 2
COUNTER = r'''
import json, os, sys, time
from pathlib import Path
d, n, dt, hold = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
d.mkdir(parents=True, exist_ok=True)
ck = d / "ckpt.json"
st = json.loads(ck.read_text()) if ck.exists() else {"step": 0}
with open(d / "starts.log", "a") as f:
    f.write(f"{st['step']}\n")
while st["step"] < n:
    while st["step"] == hold and not (d.parent / "release").exists():
        time.sleep(0.02)
    time.sleep(dt)
    st = {"step": st["step"] + 1}
    tmp = d / "ckpt.tmp"; tmp.write_text(json.dumps(st)); os.replace(tmp, ck)
(d / "result.json").write_text(json.dumps(st))
'''

DRIVER = r'''
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from slurm.launcher import Job, Launcher
root = Path({root!r})
jobs = []
for i in range(2):
    w = root / f"w{{i}}"
    jobs.append(Job(f"count/{{i}}", [sys.executable, {script!r}, str(w), "16", "0.01", "{hold}"], kind="train",
                    done=lambda w=w: (w / "result.json").exists()))
jobs.append(Job("after", [sys.executable, "-c", "open({root!r} + '/after', 'w')"], kind="collect",
                deps=["count/0", "count/1"], done=lambda: (root / "after").exists()))
Launcher(root, cluster="local", workers=2, progress=False, poll_s=0.05).run(jobs)
'''


def _driver(tmp_path):
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    drv = tmp_path / "driver.py"
    drv.write_text(DRIVER.format(repo=str(REPO), root=str(tmp_path), script=str(script), hold=HOLD))
    return drv


def _wait_held(tmp_path, wait_until, proc):
    """Until both counters have checkpointed step HOLD, where they wait for the release file."""
    def held():
        try:
            return all(json.loads((tmp_path / f"w{i}" / "ckpt.json").read_text())["step"] == HOLD
                       for i in range(2))
        except (OSError, ValueError):
            return False
    wait_until(held, "both jobs held at step HOLD", proc)


def test_killed_driver_jobs_are_adopted_not_duplicated(tmp_path, wait_until):
    drv = _driver(tmp_path)
    p = subprocess.Popen([PY, str(drv)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_held(tmp_path, wait_until, p)
    p.send_signal(signal.SIGKILL)  # the jobs survive their driver (held at step HOLD)
    p.wait()
    # a second driver adopts the running jobs; only once it has said so are they released
    p2 = subprocess.Popen([PY, str(drv)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in p2.stdout:
        seen.append(line)
        if sum("[adopt] count/" in x for x in seen) == 2:
            break
    (tmp_path / "release").write_text("")
    rest, _ = p2.communicate()
    out = "".join(seen) + rest
    assert p2.returncode == 0, out
    assert "[adopt] count/0" in out and "[adopt] count/1" in out
    for i in range(2):
        assert json.loads((tmp_path / f"w{i}" / "result.json").read_text()) == {"step": 16}
        assert (tmp_path / f"w{i}" / "starts.log").read_text().split() == ["0"]  # ran once
    assert (tmp_path / "after").exists()
    out = subprocess.run([PY, str(drv)], capture_output=True, text=True)
    assert "nothing to do: all 3 jobs are done" in out.stdout


def test_interrupted_driver_resumes(tmp_path, wait_until):
    drv = _driver(tmp_path)
    # Ctrl-C must reach Python even when this test runs in the background of a non-interactive shell, which
    # starts it with SIGINT ignored (and a child inherits that)
    p = subprocess.Popen([PY, str(drv)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_held(tmp_path, wait_until, p)
    p.send_signal(signal.SIGINT)  # Ctrl-C while the jobs are held: the driver stops them (they are resumable)
    p.wait()
    assert p.returncode != 0
    assert not (tmp_path / "w0" / "result.json").exists()
    (tmp_path / "release").write_text("")
    reg = json.loads((tmp_path / "_jobs" / "state.json").read_text())
    assert reg["count/0"]["state"] == FAILED
    assert not any(jobwrap.process_alive(r["pid"], r.get("pid_start")) for r in reg.values())
    out = subprocess.run([PY, str(drv)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    for i in range(2):
        assert json.loads((tmp_path / f"w{i}" / "result.json").read_text()) == {"step": 16}
        starts = [int(x) for x in (tmp_path / f"w{i}" / "starts.log").read_text().split()]
        assert starts == [0, HOLD]  # resumed from its checkpoint
    assert (tmp_path / "after").exists()
    marker = json.loads((tmp_path / "_jobs" / "count" / "0" / "finished").read_text())
    assert marker["attempt"] == 1 and marker["rc"] == 0


def test_running_state_of_a_live_local_job(tmp_path):
    la = quiet(tmp_path)
    la.load_registry()
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])   # killed below, whatever the load
    try:
        la._record("j", backend="local", pid=p.pid, pid_start=jobwrap.pid_start_time(p.pid),
                   host=__import__("socket").gethostname(), submission="s1")
        job = Job("j", ["x"])
        assert la.job_state(job, {})[0] == RUNNING
        la._record("j", pid_start="0")  # pid reused by another process: not ours
        assert la.job_state(job, {})[0] == TODO
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------------------------------ warm starts
PROBE = '''
import json, os, sys
json.dump({"inherited": "_pytest" in sys.modules, "warm": os.environ.get("ARMOR_WARM"), "argv": sys.argv[1:],
           "cwd": os.getcwd(), "job": os.environ.get("ARMOR_JOB_KEY"), "name": __name__},
          open(f"probe_{sys.argv[1]}.json", "w"))
print("probe says hi")
sys.exit(int(sys.argv[1]))
'''


@pytest.mark.parametrize("warm_start", [True, False], ids=["warm", "cold"])
def test_local_python_module_jobs_fork_warm(warm_start, tmp_path):
    """`python -m MODULE` jobs run in a fork of the driver (modules already imported) with the argv, cwd,
    environment, logs and exit code of a fresh interpreter; ARMOR_WARM=0 / warm_start=False starts them
    cold."""
    (tmp_path / "probe_mod.py").write_text(PROBE)
    jobs = [Job(f"probe/{rc}", [PY, "-m", "probe_mod", str(rc)], cwd=str(tmp_path)) for rc in (0, 3)]
    la = Launcher(tmp_path / "runs", cluster="local", progress=False, poll_s=0.05, log=lambda s: None,
                  warm_start=warm_start)
    states = la.run(jobs)
    assert states["probe/0"][0] == DONE and states["probe/3"][0] == FAILED
    for rc in (0, 3):
        got = json.loads((tmp_path / f"probe_{rc}.json").read_text())
        assert got["argv"] == [str(rc)] and got["cwd"] == str(tmp_path) and got["job"] == f"probe/{rc}"
        assert got["name"] == "__main__"
        assert got["inherited"] is warm_start        # a fork of this (pytest) process, or a new interpreter
        assert (got["warm"] == "1") is warm_start
        jd = tmp_path / "runs" / "_jobs" / "probe" / str(rc)
        assert "probe says hi" in (jd / "log.out").read_text()
        assert json.loads((jd / ("finished" if rc == 0 else "failed")).read_text())["rc"] == rc

"""The sized plan of the paper presets (reproduce/sizing/ via `run_all.py --dry-run`), the job shape SLURM
is asked for, plan-time errors, and the checkpoint-ready gate on the local backend."""
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from reproduce import run_all
from common.layout import list_checkpoints
from reproduce.jobs.wait import check_checkpoint, gate_path
from slurm.launcher import DONE, Gate, Job, Launcher
from slurm.resources import Resources

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def _dry(*argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = run_all.main(["--dry-run", "--cluster", "slurm", *argv])
    return rc, buf.getvalue()


def _block(lines, key):
    """The job's row and its indented lines."""
    i = next(n for n, line in enumerate(lines) if line.startswith(key + " "))
    out = [lines[i]]
    for line in lines[i + 1:]:
        if not line.startswith(" "):
            break
        out.append(line.strip())
    return out


def test_7b_dry_run_is_sized(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    rc, out = _dry("--preset", "qwen25-math-7b", "--root", str(tmp_path), "--budget-gpu-hours", "30000")
    assert rc == 0
    lines = out.splitlines()
    train = _block(lines, "stage2/anchor_only/seed0")
    assert "16x8gpu 64cpu 240GB" in train[0]          # host memory from the estimate (sizing/footprint.py)
    assert any(x.startswith("128 ranks (16 node(s) x 8); update memory/rank ~") for x in train)
    est = next(x for x in train if x.startswith("estimate: "))
    assert " h" in est and "GPU-hours on 128 GPUs" in est and re.search(r"checkpoints [0-9.]+ [GT]B", est)
    sb = next(x for x in train if x.startswith("sbatch: "))
    # the time-limit warning leaves the stop grace (1800 s: a step and its save) + SIGTERM's 30 s + 30 s
    for flag in ("--cpus-per-task=64", "--mem=245760M", "--gpus-per-node=8", "--nodes=16",
                 "--signal=USR2@1860", "--ntasks-per-node=1", "--dependency='afterok:<peak/dapo/seed0>'"):
        assert flag in sb, flag
    # a branch: armor (τ = 160) is armor_reset_never through step 159, and trains the 81 steps after it
    armor = _block(lines, "stage2/armor/seed0")
    assert armor[0].endswith("ckpt/armor_reset_never/seed0/step159")
    assert next(x for x in armor if x.startswith("estimate: ")).count("81 of 240 steps (from "
                                                                      "armor_reset_never's step 159)") == 1
    never = _block(lines, "stage2/armor_reset_never/seed0")
    line = next(x for x in never if x.startswith("armor.train"))
    keep = re.search(r"schedule\.keep_steps=\[([0-9,]+)\]", line)
    # the branch points, the restart points, and (armor is evaluated, keep_last prunes) the saves before 159
    assert set(map(int, keep.group(1).split(","))) == {79, 119, 159, 80, 120, 160} | set(range(20, 160, 20))
    assert next(x for x in train
                if x.startswith("srun: ")).startswith("srun: srun --unbuffered --cpus-per-task=64")
    tr = next(x for x in train if x.startswith("torchrun: "))
    assert ("-m torch.distributed.run --nnodes=16 --nproc_per_node=8" in tr
            and "reproduce.jobs train" in tr and "--shutdown-timeout=<KillWait + GraceTime>" in tr)
    # stage 2 waits for θ*'s checkpoint, not the end of stage 1
    assert _block(lines, "peak/dapo/seed0")[0].split()[-1] == "ckpt/dapo/seed0/step140"
    ready = _block(lines, "ckpt/dapo/seed0/step140")
    assert ready[0].split()[-1] == "fetch" and "saved step 140" in ready[1]
    assert _block(lines, "stage2/armor_late/seed0")[0].split()[-1] == "ckpt/dapo/seed0/step200"
    # each arm's evaluation: its own job after that arm alone, on a node's 8 GPUs
    ev = _block(lines, "eval/armor/seed0")
    assert "1x8gpu" in ev[0] and ev[0].split()[-1] == "stage2/armor/seed0,fetch"
    assert ev[1].startswith("torchrun --nproc-per-node 8 -m eval.evaluate")
    assert "--dependency='afterok:<stage2/armor/seed0>:<fetch>'" in next(x for x in ev
                                                                         if x.startswith("sbatch"))
    ev_est = next(x for x in ev if x.startswith("estimate"))
    assert "GPU-hours on 8 GPUs" in ev_est
    # AIME's 30 problems in chunks of 4 (--chunk-ranks 8): every GPU of the node generates; the job's limit
    # fits 1.5 x its estimate (one attempt, no requeue)
    assert "GPUs busy" not in ev_est and "attempts" not in ev_est
    hours = float(re.search(r"estimate: ([0-9.]+) h", ev_est).group(1))
    limit = re.search(r"1x8gpu \d+cpu \d+GB (\d+)h(\d+)", ev[0])
    assert int(limit.group(1)) + int(limit.group(2)) / 60 >= 1.5 * hours > 8
    # totals: the assumption named, GPU-hours, disk, the critical path and the time on the cluster
    assert ("[assumed (reproduce/sizing/throughput.py defaults), not measured]" in out
            and "throughput (expected): rollout 2,500" in out)
    assert "responses 0.14 of max_response on average (the paper's 900-1150 tokens of 8192" in out
    assert next(x for x in lines if x.startswith("total: ")).endswith("evaluation) [expected]")
    assert "checkpoints: " in out and "kept at the end under the retention policy" in out
    crit = next(x for x in lines if x.startswith("critical path (unlimited nodes): "))
    assert "ckpt/qae/seed0/step230 -> peak/qae/seed0" in crit and " nodes at once at its peak: " in crit
    pre = next(x for x in lines if x.startswith("preemption: "))
    assert "training state every 1 step(s) (schedule.state_every" in pre
    assert "at most 1 completed step(s) lost + the one in flight" in pre
    hung = next(x for x in lines if x.startswith("hung rank: "))
    assert "= 3 x max(" in hung and "not parallel.timeout_s = 10.0 h" in hung
    assert next(x for x in lines if x.startswith("on 16 node(s)"))
    assert "budget 30,000 GPU-hours" in out and "  -> --only " in out
    covered = next(x for x in lines if x.startswith("  -> --only ")).split()[-1].split(",")
    assert covered[0] == "headline" and "fig3" not in covered   # Fig. 3 is not within 30,000 GPU-hours
    # a faster assumption: fewer hours, named as the flag's
    rc2, fast = _dry("--preset", "qwen25-math-7b", "--root", str(tmp_path), "--rollout-tokens-per-s", "5000",
                     "--cluster-nodes", "32")
    assert rc2 == 0 and "from --rollout-tokens-per-s" in fast and "on 32 node(s)" in fast

    assert total(fast) < total(out)


def total(text):
    return float(next(x for x in text.splitlines() if x.startswith("total: ")).split()[1].replace(",", ""))


@pytest.mark.parametrize("preset", ["qwen25-math-7b", "qwen3-8b-base"])
def test_paper_dry_runs_print_the_preflight_a_cost_range_and_what_branching_saves(tmp_path, preset):
    rc, out = _dry("--preset", preset, "--root", str(tmp_path))
    assert rc == 0
    lines = out.splitlines()
    rng = next(x for x in lines if x.startswith("cost range (not measured; a pilot measures it: --pilot): "))
    lo, mid, hi = (float(v.replace(",", "")) for v in re.findall(r"(?:low|expected|high) ([0-9,]+)", rng))
    assert lo < mid < hi and mid == total(out)
    br = next(x for x in lines if x.startswith("branching: "))
    saved = float(re.search(r"steps not repeated, ([0-9,]+) GPU-hours saved", br).group(1).replace(",", ""))
    assert saved > 0 and "control(s) continue their stage-1 run" in br
    assert "  stage2/dapo_cont/seed0 " in out                     # continues stage-1 DAPO from its end
    # the protocol card: the authors' reward and validation, the final evaluation under both scorers
    card = out[out.index("Protocol card"):]
    assert "reward.scorer math_dapo, reward.answer_mode answer_line, prompt template dapo" in card
    assert "| amc23 | 40 |" in card and "| amc | 83 |" in card
    assert card.count("| dapo (answer_line) | math_dapo, math_verify | 32 | 16 |") == 4
    assert "[user] Solve the following math problem step by step." in card and "best@j: verl's" in card
    i = lines.index("pre-flight (on the submission host):")
    checks = {x.split("] ")[1].split(":")[0]: x.split("]")[0].strip(" [") for x in lines[i + 1:i + 9]}
    assert set(checks) == {"driver", "python", "alloc_conf", "compile_cache", "disk", "vllm_share",
                           "hf_token", "hub_access"}
    assert checks["driver"] == "not checked here"                 # no GPU here: the first GPU job checks it
    # the hub: a gated benchmark (gpqa_diamond) with no token, and compute-node access this host cannot test
    assert checks["hub_access"] == "not checked here" and checks["hf_token"] in ("ok", "FAIL")
    # without branching the same plan costs the saving more
    f = tmp_path / "nobranch.yaml"
    f.write_text(f"base: {REPO / 'reproduce/presets' / (preset + '.yaml')}\nname: {preset}\n"
                 "protocol: {branch: false}\n")
    rc, flat = _dry("--preset", str(f), "--root", str(tmp_path))
    assert rc == 0 and "\nbranching:" not in flat
    assert total(flat) == pytest.approx(mid + saved, rel=0.01)


@pytest.mark.parametrize("preset", ["qwen25-math-7b", "qwen3-8b-base"])
def test_a_budget_of_10000_gpu_hours_takes_each_models_headline_first(tmp_path, preset):
    rc, out = _dry("--preset", preset, "--root", str(tmp_path), "--budget-gpu-hours", "10000")
    assert rc == 0
    lines = out.splitlines()
    i = next(n for n, x in enumerate(lines) if x.startswith("budget 10,000 GPU-hours"))
    assert "in order of the paper's importance" in lines[i]
    assert lines[i + 1].split()[:2] == ["covered", "headline"]
    assert next(x for x in lines[i:] if x.startswith("  -> --only ")).split()[-1].split(",")[0] == "headline"
    # the headline alone: DAPO to θ* and the +ARMOR row's runs, nothing else
    rc, head = _dry("--preset", preset, "--root", str(tmp_path), "--only", "headline")
    keys = {x.split()[0] for x in head.splitlines() if x.startswith(("stage1/", "stage2/", "eval/"))}
    want = ({"stage1/dapo/seed0", "stage2/armor_reset_never/seed0", "stage2/armor_restart_160/seed0",
             "eval/dapo/seed0", "eval/armor_restart_160/seed0"} if preset == "qwen25-math-7b" else
            {"stage1/dapo/seed0", "stage2/armor/seed0", "eval/dapo/seed0", "eval/armor/seed0"})
    assert keys == want
    theta = "140" if preset == "qwen25-math-7b" else "70"
    assert f"schedule.total_steps={theta} " in next(x for x in _block(head.splitlines(), "stage1/dapo/seed0")
                                                    if x.startswith("armor.train"))


def test_the_authors_restarts_of_fig4_run_without_the_in_run_reset_arms(tmp_path):
    keys = {}
    for item in ("fig4_restarts", "fig4"):
        rc, out = _dry("--preset", "qwen25-math-7b", "--root", str(tmp_path), "--only", item)
        assert rc == 0
        keys[item] = {x.split()[0] for x in out.splitlines() if x.startswith("stage2/")}
    inrun = {k for k in keys["fig4"] if k.startswith("stage2/armor_reset_") and "never" not in k}
    assert inrun and not inrun & keys["fig4_restarts"]
    assert "stage2/armor_reset_never/seed0" in keys["fig4_restarts"]
    assert any(k.startswith("stage2/armor_restart") for k in keys["fig4_restarts"])


def test_a_split_evaluation_sizes_its_chunks_to_its_ranks(tmp_path, monkeypatch):
    from reproduce.jobs.evaluate import EVAL_RANKS_ENV, eval_command
    from reproduce.matrix.presets import load_preset
    p = load_preset("qwen25-math-7b")
    monkeypatch.setenv(EVAL_RANKS_ENV, "8")
    argv = eval_command(p, tmp_path / "ckpt", tmp_path / "out")
    assert "--nproc_per_node=8" in argv and argv[argv.index("--chunk-ranks") + 1] == "8"
    monkeypatch.setenv(EVAL_RANKS_ENV, "1")
    assert "--chunk-ranks" not in eval_command(p, tmp_path / "ckpt", tmp_path / "out")


def test_a_failed_preflight_stops_the_submission(tmp_path, monkeypatch, capsys):
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"driver": "550.54.15", "env": {"PYTORCH_CUDA_ALLOC_CONF":
                                                                "expandable_segments:True"}}))
    monkeypatch.setenv("ARMOR_PREFLIGHT_FACTS", str(facts))
    monkeypatch.setenv("HF_TOKEN", "hf_test")          # the gated dataset's check passes first
    rc = run_all.main(["--preset", "qwen25-math-7b", "--cluster", "slurm", "--root", str(tmp_path),
                       "--no-wait", "--without-pilot"])
    err = capsys.readouterr().err
    assert rc == 2 and "the pre-flight failed (driver, alloc_conf, disk): nothing submitted" in err
    assert "[FAIL] driver: NVIDIA driver 550.54.15 is older than the 580.65.06" in err
    assert not (tmp_path / "qwen25-math-7b" / "_jobs" / "state.json").exists()
    # the dry run shows the same results and exits 0
    rc = run_all.main(["--preset", "qwen25-math-7b", "--root", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "[FAIL] alloc_conf: PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'" in out


@pytest.mark.parametrize("preset", ["qwen25-math-7b", "qwen3-8b-base"])
def test_a_paper_submission_without_a_pilot_stops_naming_it_and_the_override(tmp_path, capsys, preset):
    rc = run_all.main(["--preset", preset, "--cluster", "slurm", "--root", str(tmp_path), "--no-wait"])
    err = capsys.readouterr().err
    assert rc == 2 and "no pilot has measured this plan" in err
    assert f"run_all.py --preset {preset} --pilot" in err and "--without-pilot" in err
    assert not (tmp_path / preset / "_jobs" / "state.json").exists()


@pytest.mark.parametrize("preset", ["qwen25-math-7b", "qwen3-8b-base"])
def test_the_pilots_dry_run_asks_for_one_node_sized_by_the_plans_own_estimate(tmp_path, capsys, preset):
    """The pilot's training jobs: one node, the host memory of the plan's one-node estimate for the pilot
    (its batch / protocol.nodes, no background state saves: it turns state_every off), which passes the
    plan's checks; a smaller --mem-gb fails them, naming the flag."""
    from reproduce.dag.resources import preset_resources
    from reproduce.jobs.pilot import pilot_overrides
    from reproduce.matrix.presets import load_preset
    from reproduce.sizing.checks import check_plan
    from reproduce.sizing.footprint import train_host_memory_gb
    from reproduce.sizing.throughput import throughput
    rc, out = _dry("--preset", preset, "--root", str(tmp_path), "--pilot")
    assert rc == 0
    p = load_preset(preset)
    need = train_host_memory_gb(p, 8, 1, pilot=True)
    for key in ("pilot/dapo", "pilot/armor"):
        row = next(x for x in out.splitlines() if x.startswith(key + " "))
        mem = float(re.search(r"1x8gpu \d+cpu (\d+)GB", row).group(1))
        assert need <= mem < need + 10
    res = preset_resources(p)
    # the plan's own memory formula with the pilot's overrides off would ask more (16 x the state shards)
    assert train_host_memory_gb(p, 8, 1) > need + 50 and res["train"].nodes == 16
    assert "schedule.state_every=null" in pilot_overrides(p, tmp_path, "dapo")
    from reproduce.dag.pilot_graph import pilot_train
    check_plan(p, {**res, "train": pilot_train(p, res["train"])}, throughput(p), pilot=True)
    assert run_all.main(["--preset", preset, "--dry-run", "--root", str(tmp_path), "--pilot", "--mem-gb",
                         str(int(need) - 20)]) == 2
    assert f"--mem-gb: {int(need) - 20} is below the host-memory estimate" in capsys.readouterr().err


def test_the_dry_run_after_a_recorded_gpu_pilot_prints_a_range_and_the_pilot_beside_the_assumed(tmp_path):
    pj = tmp_path / "qwen25-math-7b" / "pilot" / "pilot.json"
    pj.parent.mkdir(parents=True)
    pj.write_text(json.dumps({"complete": True, "nodes": 1, "gpus": 8, "save_s": 120.0, "push_s": 8.0,
                              "dapo": {"step_s": 400.0, "logprob_s": 40.0, "response_tokens": 575.0},
                              "armor": {"step_s": 480.0, "logprob_s": 60.0, "anchor_share": 0.4},
                              "validation_sample_s": 0.02, "eval": {"sample_s": 0.01}}))
    rc, out = _dry("--preset", "qwen25-math-7b", "--root", str(tmp_path))
    assert rc == 0 and "[measured]" in out
    rng = next(x for x in out.splitlines() if x.startswith("cost range (measured by the pilot"))
    mid, hi = (float(v.replace(",", "")) for v in re.findall(r"(?:measured|high) ([0-9,]+)", rng))
    assert mid == total(out) and hi > 1.5 * mid          # responses 2 x the pilot's: the steps 2 x
    assert "responses 2.00 x longer (the paper's 1150 tokens" in out
    i = out.splitlines().index(next(x for x in out.splitlines() if x.startswith("the pilot beside")))
    rows = out.splitlines()[i + 1:i + 7]
    assert [r.split("pilot")[0].strip() for r in rows] == ["DAPO step (s)", "ARMOR step (s)", "save (s)",
                                                           "push (s)", "validation (s)",
                                                           "mean response (tokens)"]
    assert "pilot      480.0" in rows[1] and "pilot      575.0   assumed    1,150.0" in rows[5]


def test_a_gpu_job_checks_its_node_first(tmp_path, monkeypatch):
    """Without a GPU on the submission host, each GPU job runs the node's checks before any model loads."""
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"driver": "550.54.15", "gpu_memory_gib": 80.0}))
    env = {**os.environ, "ARMOR_PREFLIGHT_FACTS": str(facts), "WORLD_SIZE": "8"}
    r = subprocess.run([PY, "-m", "reproduce.jobs", "train", "--preset", "qwen25-math-7b", "--root",
                        str(tmp_path), "--arm", "dapo", "--seed", "0"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "error: pre-flight on this node: driver: NVIDIA driver 550.54.15 is older than" in r.stderr


@pytest.mark.parametrize("argv, key", [
    (["--mem-gb", "100"], "--mem-gb: 100 is below the host-memory estimate"),
    (["--rollout-tokens-per-s", "5"], "parallel.timeout_s: 36000 is below one generation round's expected"),
    (["--rollout-tokens-per-s", "150"], "train.stop_grace_s: 1800 is below one step and its save"),
    (["--anchor-share", "2"], "--anchor-share: 2.0 must be in (0, 1]"),
    (["--gpu-mem-gb", "0"], "--gpu-mem-gb: 0.0 must be > 0"),
    (["--decode-tokens-per-s", "0"], "throughput decode_tokens_per_s: 0.0 must be > 0"),
    (["--pilot", "--only", "fig1"], "--pilot: runs the pilot of the whole preset"),
])
def test_bad_input_fails_at_plan_time(tmp_path, capsys, argv, key):
    assert run_all.main(["--preset", "qwen25-math-7b", "--dry-run", "--root", str(tmp_path), *argv]) == 2
    assert key in capsys.readouterr().err


def test_a_watchdog_floor_below_one_step_fails_at_plan_time(tmp_path, capsys):
    f = tmp_path / "stall.yaml"
    f.write_text(f"base: {REPO / 'reproduce/presets/qwen25-math-7b.yaml'}\nname: stall\n"
                 "parallel: {stall_min_s: 100}\n")
    assert run_all.main(["--preset", str(f), "--dry-run", "--root", str(tmp_path)]) == 2
    assert "parallel.stall_min_s: 100 x parallel.stall_steps 3 is below one step and its save" in \
        capsys.readouterr().err


def test_tensor_parallel_must_divide_the_gpus_per_node(tmp_path, capsys):
    f = tmp_path / "tp3.yaml"
    f.write_text(f"base: {REPO / 'reproduce/presets/qwen25-math-7b.yaml'}\nname: tp3\n"
                 "rollout: {tensor_parallel_size: 3}\n")
    assert run_all.main(["--preset", str(f), "--dry-run", "--root", str(tmp_path)]) == 2
    assert "rollout.tensor_parallel_size: 3 does not divide the 8 GPUs per node" in capsys.readouterr().err


def test_job_env_threads_and_network_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth1")
    la = Launcher(tmp_path, cluster="slurm", progress=False)
    res = Resources(nodes=2, gpus_per_node=8, cpus_per_task=64, env={"NCCL_DEBUG": "WARN"})
    env = la.job_env(Job("t", [PY, "-m", "x"], resources=res, launch="torchrun"))
    assert env["ARMOR_THREADS"] == env["OMP_NUM_THREADS"] == "8"
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"],
            env["NCCL_DEBUG"]) == ("ib0", "eth1", "WARN")
    lines = la.command_lines(Job("t", [PY, "-m", "x"], resources=res, launch="torchrun", deps=["a"]))
    assert "--cpus-per-task=64" in lines["srun"] and "--dependency='afterok:<a>'" in lines["sbatch"]
    assert "--nnodes=2" in lines["torchrun"] and "--node_rank=<SLURM_NODEID>" in lines["torchrun"]


def test_checkpoint_ready_job_checks_once(tmp_path):
    """The checkpoint-ready job does not poll (the launcher starts it once the checkpoint exists): it ends at
    once, 0 with a complete checkpoint, 1 naming the run and the step without one."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000004").mkdir(parents=True)
    logs = []
    assert check_checkpoint(run, 4, log=lambda *a, **k: logs.append(a[0])) == 1     # no trainer_state.pt yet
    assert "no complete checkpoint of step 4" in logs[-1] and str(gate_path(run, 4)) in logs[-1]
    gate_path(run, 4).write_bytes(b"x")
    assert check_checkpoint(run, 4, log=lambda *a, **k: None) == 0


def test_local_backend_starts_stage_2_while_stage_1_runs(tmp_path):
    """A fake stage-1 job saves step 2, then waits until the job that depends on step 2 has started: the
    driver can only finish if it opened the gate on step 2 while stage 1 was still running. The gated job
    took no worker while it waited: with 2 workers, stage 1 and the other job run meanwhile."""
    run = tmp_path / "run"
    started, other = tmp_path / "stage2_started", tmp_path / "other_ran"
    stage1 = textwrap.dedent(f"""
        import pathlib, sys, time
        deadline = time.time() + 120
        while not pathlib.Path({str(other)!r}).exists():   # the other job ran beside: the gate held no worker
            if time.time() > deadline: sys.exit(4)
            time.sleep(0.05)
        ck = pathlib.Path({str(run)!r}) / "checkpoints" / "step_000002"
        ck.mkdir(parents=True); (ck / "trainer_state.pt").write_bytes(b"x")
        while not pathlib.Path({str(started)!r}).exists():
            if time.time() > deadline: sys.exit(3)
            time.sleep(0.05)
        (pathlib.Path({str(run)!r}) / "DONE").write_text("{{}}")
    """)
    ready = Job("ckpt/a/seed0/step2", [PY, "-m", "reproduce.jobs", "wait-checkpoint", "--run", str(run),
                                       "--step", "2"], kind="wait_checkpoint",
                gate=Gate(str(gate_path(run, 2)), "stage1/a/seed0"))
    jobs = [ready,
            Job("stage1/a/seed0", [PY, "-c", stage1], kind="train", done=lambda: (run / "DONE").exists()),
            Job("other", [PY, "-c", f"open({str(other)!r}, 'w').close()"], kind="collect",
                done=other.exists),
            Job("stage2/b/seed0", [PY, "-c", f"open({str(started)!r}, 'w').close()"], kind="train",
                deps=["ckpt/a/seed0/step2"], done=lambda: started.exists())]
    la = Launcher(tmp_path / "root", cluster="local", workers=2, progress=False, poll_s=0.05,
                  log=lambda s: None, warm_start=False)
    states = la.run(jobs)
    assert all(s == DONE for s, _ in states.values()), states
    marker = json.loads((la.job_dir("ckpt/a/seed0/step2") / "finished").read_text())
    assert marker["rc"] == 0 and (run / "DONE").exists()


@pytest.mark.parametrize("stage1, verdict", [
    ("import sys; sys.exit(3)", ("blocked", "stage1/a/seed0 failed before")),
    ("import pathlib; pathlib.Path(%r).write_text('{}')", ("failed", "stage1/a/seed0 ended without")),
])
def test_local_gate_fails_when_the_watched_job_fails_or_ends_without_it(tmp_path, stage1, verdict):
    run = tmp_path / "run"
    code = stage1 % str(run / "DONE") if "%r" in stage1 else stage1
    run.mkdir()
    jobs = [Job("ckpt/a/seed0/step2", [PY, "-c", "pass"], kind="wait_checkpoint",
                gate=Gate(str(gate_path(run, 2)), "stage1/a/seed0"),
                done=lambda: 2 in list_checkpoints(run)),
            Job("stage1/a/seed0", [PY, "-c", code], kind="train", done=lambda: (run / "DONE").exists()),
            Job("stage2/b/seed0", [PY, "-c", "pass"], kind="train", deps=["ckpt/a/seed0/step2"])]
    la = Launcher(tmp_path / "root", cluster="local", workers=2, progress=False, poll_s=0.05,
                  log=lambda s: None, warm_start=False)
    states = la.run(jobs)
    st, detail = states["ckpt/a/seed0/step2"]
    assert (st, detail.split(" gate ")[0][:len(verdict[1])]) == verdict and str(gate_path(run, 2)) in detail
    assert states["stage2/b/seed0"][0] == "blocked"
    assert not la.job_dir("ckpt/a/seed0/step2").exists() or not (la.job_dir("ckpt/a/seed0/step2")
                                                                  / "started").exists()


def test_local_gate_after_a_failed_stage_1_opens_on_the_rerun(tmp_path):
    """The first driver: stage 1 fails, the gate is blocked. The rerun retries stage 1 (its failure recorded
    before does not block the gate again), which saves step 2: the gate opens and stage 2 runs."""
    run, ok, started = tmp_path / "run", tmp_path / "ok", tmp_path / "stage2_started"
    stage1 = textwrap.dedent(f"""
        import pathlib, sys
        if not pathlib.Path({str(ok)!r}).exists(): sys.exit(3)
        ck = pathlib.Path({str(run)!r}) / "checkpoints" / "step_000002"
        ck.mkdir(parents=True); (ck / "trainer_state.pt").write_bytes(b"x")
        (pathlib.Path({str(run)!r}) / "DONE").write_text("{{}}")
    """)
    jobs = [Job("ckpt/a/seed0/step2", [PY, "-c", "pass"], kind="wait_checkpoint",
                gate=Gate(str(gate_path(run, 2)), "stage1/a/seed0"), done=lambda: 2 in list_checkpoints(run)),
            Job("stage1/a/seed0", [PY, "-c", stage1], kind="train", done=lambda: (run / "DONE").exists()),
            Job("stage2/b/seed0", [PY, "-c", f"open({str(started)!r}, 'w').close()"], kind="train",
                deps=["ckpt/a/seed0/step2"], done=started.exists)]

    def driver():
        return Launcher(tmp_path / "root", cluster="local", workers=2, progress=False, poll_s=0.05,
                        log=lambda s: None, warm_start=False).run(jobs)
    first = driver()
    assert first["stage1/a/seed0"][0] == "failed" and first["ckpt/a/seed0/step2"][0] == "blocked"
    ok.write_text("")
    assert all(s == DONE for s, _ in driver().values()) and started.exists()

"""Stage 2 on the real local SLURM (bash slurm/cluster_up.sh) when θ* comes after longer than any job's time
limit: the checkpoint-ready job is held (launcher.Gate), not a polling job with a time cap, and the stage-1
job's wrapper releases it when θ* is saved."""
import dataclasses
import json
import subprocess
from datetime import datetime

import pandas as pd
import pytest

from reproduce.dag.graph import build_jobs
from reproduce.dag.resources import preset_resources
from reproduce.matrix.presets import load_preset, preset_root
from slurm.launcher import DONE, Launcher
from test_experiments import FAKE_EVAL, FAKE_FIGURES, FAKE_TRAIN, FAKE_WORLD, MINI, PY, REPO, _mini_preset

pytestmark = pytest.mark.slurm
HOLD_AT = "        if s % cfg.schedule.save_every == 0 or s == n"     # the fake run's save, before it
# the fake stage-1 run (step_offset 0) waits before it saves step FAKE_HOLD's until that file exists
HOLD = ('        hold = os.environ.get("FAKE_HOLD", "")\n'
        '        if hold and cfg.step_offset == 0 and s == int(hold.split(":")[0]):\n'
        '            while not Path(hold.split(":", 1)[1]).exists():\n'
        '                time.sleep(0.1)\n')


def _fakes(tmp_path, monkeypatch):
    d = tmp_path / "fakes"
    d.mkdir()
    assert HOLD_AT in FAKE_TRAIN
    train = FAKE_TRAIN.format(repo=str(REPO)).replace(HOLD_AT, HOLD + HOLD_AT)
    for name, text in (("train.py", train), ("evaluate.py", FAKE_EVAL), ("figures.py", FAKE_FIGURES),
                       ("world.py", FAKE_WORLD)):
        (d / name).write_text(text)
    monkeypatch.setenv("ARMOR_REPRO_ENTRYPOINTS", json.dumps({
        "armor.train": [PY, str(d / "train.py")], "eval.evaluate": [PY, str(d / "evaluate.py")],
        "figures": [PY, str(d / "figures.py")], "reproduce.toy.build": [PY, str(d / "world.py")]}))


def _show(jid: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", jid], capture_output=True, text=True).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def _state(jid: str) -> str:
    return subprocess.run(["squeue", "-h", "--states=all", "-j", jid, "-o", "%T"], capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.slow      # 30-120 s: run with -m slow (README)
@pytest.mark.timeout(1200)
def test_stage2_and_evaluation_run_when_theta_star_comes_after_every_time_limit(slurm_cluster, tmp_path,
                                                                                monkeypatch, wait_until):
    _fakes(tmp_path, monkeypatch)
    preset = load_preset(_mini_preset(tmp_path, text=MINI.replace("  stage1_steps: 6\n",
                                                                  "  stage1_steps: 6\n  peak_step: 4\n")))
    res = {k: dataclasses.replace(r, time_min=1) for k, r in preset_resources(preset).items()}  # every job
    # Fig. 1 reads all of stage 1, so θ* (step 4) comes before its end (tables alone would stop it at θ*)
    jobs = build_jobs(preset, tmp_path / "runs", only=["table3", "fig1"], resources=res)
    gated = [j for j in jobs if j.gate is not None]
    assert [j.key for j in gated] == ["ckpt/dapo/seed0/step4"]
    assert all(j.resources.time_min == 1 for j in jobs)
    theta = tmp_path / "theta_star_may_come"
    monkeypatch.setenv("FAKE_HOLD", f"4:{theta}")
    out = preset_root(tmp_path / "runs", preset)

    def launcher():   # the time-limit warning 15 s before the limit; SIGKILL 3 s after SIGTERM
        return Launcher(out, cluster="slurm", progress=False, poll_s=0.5, log=lambda s: None,
                        signal_delay_s=15, grace_s=3)
    la = launcher()
    la.run(jobs, wait=False)                      # submit and leave (--no-wait)
    reg = la.load_registry()
    gate_id, stage1_id = reg["ckpt/dapo/seed0/step4"]["job_id"], reg["stage1/dapo/seed0"]["job_id"]
    assert _show(gate_id)["Reason"] == "JobHeldUser"
    # a clock: a 1-minute job submitted after the gate; its TIMEOUT says a whole time limit has gone by
    clock = subprocess.check_output(["sbatch", "--parsable", "--time=1", "-c", "1", "--mem=64M", "-J",
                                     "armor-clock", "-o", str(tmp_path / "clock.out"), "--wrap", "sleep 600"],
                                    text=True).strip()
    wait_until(lambda: _state(clock) == "TIMEOUT", "the clock job's time limit")
    assert _show(gate_id)["JobState"] == "PENDING" and _show(gate_id)["Reason"] == "JobHeldUser"
    theta.write_text("")                          # only now may stage 1 save θ* (step 4)

    states = launcher().run(jobs)                 # a driver follows the rest to the end
    assert all(s == DONE for s, _ in states.values()), states
    gate = _show(gate_id)
    waited = (datetime.fromisoformat(gate["StartTime"]) - datetime.fromisoformat(gate["SubmitTime"]))
    assert gate["TimeLimit"] == "00:01:00" and waited.total_seconds() > 60, gate
    assert gate["JobState"] == "COMPLETED" and gate["Restarts"] == "0"      # ran once, never requeued
    assert len((la.job_dir("ckpt/dapo/seed0/step4") / "attempts.jsonl").read_text().splitlines()) == 1
    log = (la.job_dir("stage1/dapo/seed0") / "log.out").read_text()
    assert f"released ckpt/dapo/seed0/step4 (slurm {gate_id})" in log      # by the stage-1 job's wrapper
    # stage 1 itself ran into its time limit while θ* was not there yet: requeued, same job id
    assert int(_show(stage1_id)["Restarts"]) >= 1
    df = pd.read_parquet(out / "results.parquet")
    ev = df[df.source == "eval"]
    assert {"dapo", "armor", "opd", "mopd"} <= set(ev["arm"])         # and armor's alias armor_reset_2
    peak = json.loads((out / "dapo" / "seed0" / "peak.json").read_text())
    assert peak["step"] == 4 and set(df[df.arm == "armor"]["step"]) >= {4, 8}


def test_a_driver_rerun_releases_a_gate_whose_path_exists(slurm_cluster, tmp_path, wait_until):
    """The watched job has not even started (its own dependency holds it), so its wrapper cannot release the
    gate; the path appears anyway (here: the test writes it). A rerun driver (--no-wait) reads the gate done
    by its outputs, sees its SLURM job still held, and releases it: the job that depends on it runs."""
    from slurm.launcher import Gate, Job
    from slurm.resources import Resources
    small = Resources(cpus_per_task=1, mem_gb=0.25, time_min=5)
    go, path, ran = tmp_path / "go", tmp_path / "ckpt" / "trainer_state.pt", tmp_path / "after_ran"
    wait_go = f"import pathlib, time\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.1)"
    jobs = [Job("blocker", [PY, "-c", wait_go], resources=small, done=go.exists),
            Job("stage1/w", [PY, "-c", "pass"], deps=["blocker"], resources=small),
            Job("ckpt/w", [PY, "-c", "pass"], resources=small, gate=Gate(str(path), "stage1/w"),
                done=path.exists),
            Job("after", [PY, "-c", f"open({str(ran)!r}, 'w').close()"], deps=["ckpt/w"], resources=small,
                done=ran.exists)]
    logs = []
    la = Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5, log=logs.append)
    la.run(jobs, wait=False)
    gate_id = la.load_registry()["ckpt/w"]["job_id"]
    assert _show(gate_id)["Reason"] == "JobHeldUser"
    path.parent.mkdir()
    path.write_bytes(b"x")
    Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5, log=logs.append).run(jobs,
                                                                                                  wait=False)
    assert any(line.startswith(f"[release] ckpt/w (slurm {gate_id})") for line in logs), logs
    wait_until(ran.exists, "the job after the released gate")
    go.write_text("")
    states = Launcher(tmp_path / "runs", cluster="slurm", progress=False, poll_s=0.5,
                      log=logs.append).run(jobs)
    assert all(s == DONE for s, _ in states.values()), states
    assert _show(gate_id)["JobState"] == "COMPLETED"

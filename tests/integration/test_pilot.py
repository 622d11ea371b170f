"""The pilot (`run_all.py --pilot`; reproduce/dag/pilot_graph.py, reproduce/jobs/pilot.py) on the smoke world:
a few DAPO and ARMOR steps on one node, a stop by the time-limit signal and its resume, saves, an evaluation
slice; pilot.json; then the dry run sizes the plan from it, marked measured. Locally (the stop through the
wrapper's stop file, the resume in a new process) and on the real local SLURM (scancel --signal=USR2 on the
job, as the time-limit warning, and SLURM's requeue)."""
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from common.jsonl import read_jsonl
from reproduce import run_all
from reproduce.sizing.estimates import estimate_jobs
from reproduce.sizing.throughput import read_pilot, throughput
from reproduce.dag.graph import build_jobs
from reproduce.matrix.presets import load_preset

ROOT = Path(__file__).resolve().parents[2]


def _preset(tmp: Path, world: Path) -> Path:
    p = tmp / "smoke.yaml"
    p.write_text(
        f"base: {ROOT / 'reproduce' / 'presets' / 'smoke.yaml'}\n"
        f"model: {{path: {world / 'base_model'}}}\n"
        f"data: {{train: {world / 'data' / 'train.jsonl'}}}\n"
        f"validation: {{benchmarks: ['toy_val={world / 'data' / 'validation.jsonl'}']}}\n"
        f"protocol: {{eval_benchmarks: ['toy_test={world / 'data' / 'test.jsonl'}']}}\n")
    return p


def _main(*argv) -> tuple[int, str]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = run_all.main(list(argv))
    return rc, buf.getvalue()


def _check_pilot(preset: Path, root: Path, out: str, cluster: str) -> dict:
    pj = root / "smoke" / "pilot" / "pilot.json"
    rep = json.loads(pj.read_text())
    assert rep["complete"] and rep["nodes"] == 1 and rep["dapo"]["steps"] == 3 and rep["armor"]["steps"] == 2
    st = rep["stop"]
    assert st["exercised"] and st["asked"]["at_step"] == 1 and st["saved_step"] == 1
    assert st["resumed_from"] == 1
    assert rep["armor"]["ref_samples"] > 0 and 0 < rep["armor"]["anchor_share"] <= 1
    assert rep["eval"]["samples"] > 0 and rep["eval"]["seconds"] > 0
    # two attempts of the DAPO phase: stopped after saving step 1, then resumed from it to step 3
    times = read_jsonl(root / "smoke" / "pilot" / "dapo" / "pilot_times.jsonl")
    got = [(t["resumed_from"], t["steps_done"], t["stopped"]) for t in times]
    assert got == [(None, 1, 12), (1, 3, None)]
    assert "the dry run sizes the plan from it now" in out and "stop by the time-limit signal: asked" in out
    # the dry run reads it: its hours are the pilot's, marked measured
    rc, dry = _main("--preset", str(preset), "--root", str(root), "--cluster", cluster, "--dry-run")
    assert rc == 0, dry
    assert f"throughput: measured by the pilot ({pj}" in dry and "[measured]" in dry
    assert "cost range" not in dry                          # measured: no assumed range
    p = load_preset(preset)
    m = read_pilot(pj)
    jobs = {j.key: j for j in build_jobs(p, root)}
    est = estimate_jobs(p, [jobs["stage1/dapo/seed0"]], throughput(p, pilot=m))
    # 4 DAPO steps, 3 validations (steps 0, 2, 4) of 16 problems x 2 samples, 2 saves, at the pilot's seconds;
    # the pilot's DAPO step holds πref's forward (the KL monitor, as the arm's), so whatever ARMOR's log-prob
    # phase took adds nothing (two timings taken at different moments: not a figure to compare exactly)
    assert rep["dapo"]["reference_logprobs"] and m.dapo_reads_reference
    want = 4 * m.dapo_step_s + 3 * 32 * m.validation_sample_s + 2 * m.save_s
    assert est["stage1/dapo/seed0"].hours * 3600 == pytest.approx(want)
    rc, again = _main("--preset", str(preset), "--root", str(root), "--cluster", cluster, "--pilot",
                      "--no-progress")
    assert rc == 0 and "nothing to do" in again
    return rep


def test_the_pilot_locally_then_the_dry_run_is_measured(world, tmp_path):
    preset, root = _preset(tmp_path, world), tmp_path / "runs"
    rc, out = _main("--preset", str(preset), "--root", str(root), "--cluster", "local", "--pilot",
                    "--no-progress", "--poll", "0.2")
    assert rc == 0, out
    rep = _check_pilot(preset, root, out, "local")
    assert rep["stop"]["asked"]["how"] == "the wrapper's stop file"


@pytest.mark.slow      # 30-120 s: run with -m slow (README)
@pytest.mark.slurm
def test_the_pilot_under_slurm_stops_by_the_time_limit_signal_and_is_requeued(world, tmp_path,
                                                                               slurm_cluster):
    preset, root = _preset(tmp_path, world), tmp_path / "runs"
    rc, out = _main("--preset", str(preset), "--root", str(root), "--cluster", "slurm", "--pilot",
                    "--no-progress", "--poll", "1")
    assert rc == 0, out
    rep = _check_pilot(preset, root, out, "slurm")
    jd = root / "smoke" / "_jobs" / "pilot" / "dapo"
    attempts = read_jsonl(jd / "attempts.jsonl")
    job = attempts[0]["slurm_job_id"]
    # SLURM's warning signal on the job, then its requeue: the same job, a second attempt
    assert rep["stop"]["asked"]["how"].startswith(f"scancel --signal=USR2 {job}")
    assert [a["attempt"] for a in attempts] == [1, 2] and {a["slurm_job_id"] for a in attempts} == {job}
    log = (jd / "log.out").read_text()
    assert "(interrupted)" in log and "(finished)" in log

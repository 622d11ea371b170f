"""Branch, don't repeat (reproduce/matrix/branching.py) on the smoke world: a run that starts from its
sibling's checkpoint equals the run from its own start, and a control that continues its baseline's run
equals that run trained longer; the trunk's extra save and stage 1's monitor reset change no trained step."""
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
from safetensors.torch import load_file

from common.jsonl import read_jsonl
from reproduce import run_all
from reproduce.jobs.branch_folder import seed_run
from toy_runs import run, train_cmd

ROOT = Path(__file__).resolve().parents[2]


def _preset(tmp: Path, world: Path, branch: bool) -> Path:
    """The smoke protocol with a 6-step stage 2 and τ = 4: armor equals armor_reset_never through step 3."""
    d = tmp / ("branch" if branch else "scratch")
    d.mkdir(parents=True)
    p = d / "smoke.yaml"
    p.write_text(
        f"base: {ROOT / 'reproduce' / 'presets' / 'smoke.yaml'}\n"
        f"model: {{path: {world / 'base_model'}}}\n"
        f"data: {{train: {world / 'data' / 'train.jsonl'}}}\n"
        f"validation: {{benchmarks: ['toy_val={world / 'data' / 'validation.jsonl'}']}}\n"
        f"protocol: {{stage2_steps: 6, armor_reset_every: 4, reset_sweep: [4], "
        f"branch: {str(branch).lower()}, eval_benchmarks: ['toy_test={world / 'data' / 'test.jsonl'}']}}\n")
    return p


def _driver(preset: Path, root: Path) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = run_all.main(["--preset", str(preset), "--cluster", "local", "--root", str(root),
                           "--only", "fig4", "--workers", "2", "--no-progress", "--poll", "0.2"])
    assert rc == 0, buf.getvalue()[-3000:]
    return buf.getvalue()


def _steps(root: Path, arm: str) -> pd.DataFrame:
    df = pd.read_parquet(root / "smoke" / "steps.parquet")
    df = df[df.arm == arm].sort_values("step").reset_index(drop=True)
    return df[[c for c in df.columns if not c.startswith("time_")]]


@pytest.fixture(scope="module")
def two_runs(world, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("branching")
    roots = {}
    for branch in (True, False):
        root = tmp / ("runs_branch" if branch else "runs_scratch")
        out = _driver(_preset(tmp, world, branch), root)
        roots[branch] = (root, out)
    return roots


def test_a_sibling_branch_equals_its_run_from_the_start(two_runs):
    (b, _), (s, _) = two_runs[True], two_runs[False]
    run_b, run_s = (r / "smoke" / "armor" / "seed0" for r in (b, s))
    info = json.loads((run_b / "branch.json").read_text())
    assert info["step"] == 3 and info["source"].endswith("armor_reset_never/seed0")
    assert not (run_s / "branch.json").exists()
    # the branch trained steps 4-6 only: its rows 1-3 are the sibling's, its first own checkpoint is step 4
    log = (b / "smoke" / "_jobs" / "stage2" / "armor" / "seed0" / "log.out").read_text()
    assert "starts from" in log and "at step 3" in log
    assert [r["step"] for r in read_jsonl(run_b / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    pd.testing.assert_frame_equal(_steps(b, "armor"), _steps(s, "armor"))
    assert list(_steps(b, "armor")["reference_reset"]) == [False, False, False, True, False, False]
    val = {k: pd.read_parquet(r / "smoke" / "results.parquet").query("arm == 'armor'")
           .sort_values(["step", "metric"]).reset_index(drop=True) for k, r in (("b", b), ("s", s))}
    pd.testing.assert_frame_equal(val["b"], val["s"])
    wb, ws = (load_file(str(r / "checkpoints" / "step_000006" / "model.safetensors")) for r in (run_b, run_s))
    assert wb.keys() == ws.keys() and all((wb[k] == ws[k]).all() for k in wb)      # bit for bit
    # the trunk saved the branch point beside its schedule, and trained the same steps for it
    assert (b / "smoke" / "armor_reset_never" / "seed0" / "checkpoints" / "step_000003").is_dir()
    assert not (s / "smoke" / "armor_reset_never" / "seed0" / "checkpoints" / "step_000003").exists()
    pd.testing.assert_frame_equal(_steps(b, "armor_reset_never"), _steps(s, "armor_reset_never"))
    assert "\nbranching: 1 run(s) start from a sibling's checkpoint" in _dry(b)
    assert "\nbranching:" not in _dry(s)


def test_stage_1s_monitor_reset_changes_no_trained_step(two_runs):
    """With branching, stage-1 DAPO resets πref at the continued dapo_late's start (step 4): only its
    `reference_reset` flag differs, every trained quantity and the validation curve are the same."""
    (b, _), (s, _) = two_runs[True], two_runs[False]
    db, ds = _steps(b, "dapo"), _steps(s, "dapo")
    assert list(db["reference_reset"]) == [False, False, False, True] and not ds["reference_reset"].any()
    pd.testing.assert_frame_equal(db.drop(columns="reference_reset"), ds.drop(columns="reference_reset"))


def _dry(root: Path) -> str:
    preset = root.parent / ("branch" if root.name == "runs_branch" else "scratch") / "smoke.yaml"
    r = subprocess.run([sys.executable, "reproduce/run_all.py", "--preset", str(preset), "--root", str(root),
                        "--only", "fig4", "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_continuation_equals_its_baseline_trained_longer(world, tmp_path):
    """A continued control's folder: the baseline's rows to its end and its last checkpoint (seed_run), then
    armor.train to the later end; the same as the baseline run that long from its start."""
    cfg = ["schedule.save_every=2", "schedule.validate_every=2", "validation.max_problems=8",
           "algo.reference.reset.every=2", "algo.reference.reset.until_step=2"]    # the monitor reset at θ*
    base, cont, whole = tmp_path / "base", tmp_path / "cont", tmp_path / "whole"
    for out, steps in ((base, 4), (whole, 6)):
        r = run(train_cmd(world, out, f"schedule.total_steps={steps}", *cfg))
        assert r.returncode == 0, r.stderr[-2000:]
    assert seed_run(base, 4, cont, only_last=True) == [4]
    r = run(train_cmd(world, cont, "schedule.total_steps=6", *cfg))
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("metrics.jsonl", "validation.jsonl"):
        a = [{k: v for k, v in x.items() if not k.startswith("time_")} for x in read_jsonl(cont / name)]
        w = [{k: v for k, v in x.items() if not k.startswith("time_")} for x in read_jsonl(whole / name)]
        assert a == w, name
    wc, ww = (load_file(str(r / "checkpoints" / "step_000006" / "model.safetensors")) for r in (cont, whole))
    assert all((wc[k] == ww[k]).all() for k in wc)

"""The driver with the REAL entry points (trainer, harness, figures) on the smoke world: locally and on
the real SLURM that .ci/run starts. A subset of items keeps it to a minute or two per cluster."""
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _preset(tmp: Path, world: Path) -> Path:
    p = tmp / "smoke.yaml"   # named smoke: the driver builds (or finds) a --quick world
    p.write_text(
        f"base: {ROOT / 'reproduce' / 'presets' / 'smoke.yaml'}\n"
        f"model: {{path: {world / 'base_model'}}}\n"
        f"data: {{train: {world / 'data' / 'train.jsonl'}}}\n"
        f"validation: {{benchmarks: ['toy_val={world / 'data' / 'validation.jsonl'}']}}\n"
        f"protocol: {{eval_benchmarks: ['toy_test={world / 'data' / 'test.jsonl'}']}}\n")
    return p


def _run(args, timeout=600):
    r = subprocess.run([sys.executable, "reproduce/run_all.py", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def _check(root: Path):
    pr = root / "smoke"
    df = pd.read_parquet(pr / "results.parquet")
    assert {"dapo", "armor", "armor_reset_never"} <= set(df["arm"])
    assert set(df["source"]) == {"validation"}      # fig4 is drawn from validation curves (no table asked)
    assert (pr / "REPRODUCTION.md").is_file()
    pngs = list((pr / "figures").rglob("fig4*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
    peak = (pr / "dapo" / "seed0" / "peak.json")
    assert peak.is_file()


@pytest.mark.parametrize("cluster", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_run_all_smoke_real_entry_points(cluster, world, tmp_path, request):
    if cluster == "slurm":
        request.getfixturevalue("slurm_cluster")
    preset = _preset(tmp_path, world)
    args = ["--preset", str(preset), "--cluster", cluster, "--root", str(tmp_path / "runs"), "--only", "fig4",
            "--no-progress", "--poll", "1"]
    _run(args)
    _check(tmp_path / "runs")
    out = _run(args)            # a second invocation right after a finished run submits nothing
    assert "nothing to do" in out

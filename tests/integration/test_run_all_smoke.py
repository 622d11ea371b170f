"""The driver with the REAL entry points (trainer, harness, figures) on the smoke world: the full matrix
locally (every figure and table from a real run, checked panel by panel and number by number), and a subset
(Fig. 4) on the real SLURM that .ci/run starts."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _preset(tmp: Path, world: Path, protocol: str = "") -> Path:
    p = tmp / "smoke.yaml"   # named smoke: the driver builds (or finds) a --quick world
    p.write_text(
        f"base: {ROOT / 'reproduce' / 'presets' / 'smoke.yaml'}\n"
        f"model: {{path: {world / 'base_model'}}}\n"
        f"data: {{train: {world / 'data' / 'train.jsonl'}}}\n"
        f"validation: {{benchmarks: ['toy_val={world / 'data' / 'validation.jsonl'}']}}\n"
        f"protocol: {{eval_benchmarks: ['toy_test={world / 'data' / 'test.jsonl'}']{protocol}}}\n")
    return p


def _run(args, timeout=600):
    r = subprocess.run([sys.executable, "reproduce/run_all.py", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def _check(root: Path):
    pr = root / "smoke"
    df = pd.read_parquet(pr / "results.parquet")
    assert {"dapo", "armor", "armor_reset_never", "opd", "mopd"} <= set(df["arm"])
    assert set(df["source"]) == {"validation", "eval"}          # Fig. 4 from validation, Table 3 from eval
    assert {"dapo", "armor", "opd", "mopd"} <= set(df[df.source == "eval"]["arm"])   # (+ armor's aliases)
    assert (pr / "REPRODUCTION.md").is_file()
    pngs = list((pr / "figures").rglob("fig4*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)
    assert "| OPD |" in (pr / "figures" / "table3.md").read_text()
    peak = (pr / "dapo" / "seed0" / "peak.json")
    assert peak.is_file()


@pytest.fixture(scope="module")
def slurm_smoke(world, tmp_path_factory, slurm_cluster):
    """A smoke DAG through sbatch (stage 1, θ*, stage-2 arms, an evaluation array, collection, figures)."""
    tmp = tmp_path_factory.mktemp("slurm")
    args = ["--preset", str(_preset(tmp, world)), "--cluster", "slurm", "--root", str(tmp / "runs"),
            "--only", "fig4,table3", "--no-progress", "--poll", "1"]
    _run(args, timeout=900)
    return {"root": tmp / "runs", "args": args}


@pytest.mark.slurm
def test_run_all_smoke_on_the_real_slurm(slurm_smoke):
    root = slurm_smoke["root"]
    _check(root)
    reg = json.loads((root / "smoke" / "_jobs" / "state.json").read_text())
    evals = {k: v for k, v in reg.items() if k.startswith("eval/")}
    assert len(evals) == 4 and all(v["backend"] == "slurm" for v in evals.values())
    # each arm's evaluation is its own job, after that arm alone (no array waiting for every arm)
    ids = [v["job_id"] for v in evals.values()]
    assert len(set(ids)) == 4 and not any("_" in i for i in ids)
    out = _run(slurm_smoke["args"])     # a second invocation right after a finished run submits nothing
    assert "nothing to do" in out


@pytest.mark.slurm
def test_slurm_and_local_runs_give_the_same_table(slurm_smoke, full_smoke):
    """The README's guarantee: the same preset gives byte-identical results locally (warm forks, 1 thread a
    job) and through SLURM (a cold interpreter per job, its own CPU allocation), every job computing with the
    pinned CPU numerics (common/cpu_numerics.py)."""
    local = pd.read_parquet(full_smoke["results"])
    slurm = pd.read_parquet(slurm_smoke["root"] / "smoke" / "results.parquet")
    key = ["arm", "seed", "step", "benchmark", "metric", "source"]
    both = slurm.merge(local, on=key, suffixes=("_slurm", "_local"))
    assert len(both) == len(slurm) > 20 and set(both["source"]) == {"validation", "eval"}
    assert (both["value_slurm"] == both["value_local"]).all(), both[both.value_slurm != both.value_local]
    for root in (slurm_smoke["root"], full_smoke["results"].parent.parent):
        meta = json.loads((root / "smoke" / "results.meta.json").read_text())
        assert [(n["cpu_capability"], n["threads"]) for n in meta["cpu_numerics"]] == [("AVX2", 1)], meta


def test_one_worker_runs_to_the_end_in_one_invocation(world, tmp_path):
    """`--workers 1` with a fixed θ* before stage 1's end: θ*'s checkpoint-ready job is settled by its
    checkpoint in a pass that starts nothing, after the job choosing θ* (which waits for it) was passed over;
    the driver goes on and runs everything in one invocation, not stopping with the rest still to do."""
    from reproduce.dag.graph import build_jobs
    from reproduce.matrix.presets import load_preset
    pre, root = _preset(tmp_path, world, ", peak_step: 2"), tmp_path / "runs"
    jobs = {j.key: j for j in build_jobs(load_preset(str(pre)), root, only=["fig1"])}
    assert jobs["ckpt/dapo/seed0/step2"].gate is not None       # the case: θ* before the run's end
    assert "ckpt/dapo/seed0/step2" in jobs["peak/dapo/seed0"].deps
    out = _run(["--preset", str(pre), "--cluster", "local", "--root", str(root), "--only", "fig1",
                "--workers", "1", "--no-progress", "--poll", "0.2"], timeout=600)
    assert f"all {len(jobs)} jobs done" in out and "did not finish" not in out
    assert json.loads((root / "smoke" / "dapo" / "seed0" / "peak.json").read_text())["step"] == 2


# ------------------------------------------------------------ the full smoke matrix, then python -m figures
@pytest.fixture(scope="module")
def full_smoke(world, tmp_path_factory):
    """`python reproduce/run_all.py --preset smoke` (every figure and table) on the real entry points, then
    `python -m figures` on its results table into a fresh folder."""
    tmp = tmp_path_factory.mktemp("full")
    args = ["--preset", str(_preset(tmp, world)), "--cluster", "local", "--root", str(tmp / "runs"),
            "--no-progress", "--poll", "0.5"]
    first = _run(args, timeout=900)
    second = _run(args)                    # a second invocation right after a finished run submits nothing
    results = tmp / "runs" / "smoke" / "results.parquet"
    out = tmp / "figs"
    r = subprocess.run([sys.executable, "-m", "figures", "--results", str(results), "--out", str(out),
                        "--report", str(tmp / "REPRODUCTION.md")], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {"results": results, "out": out, "first": first, "second": second,
            "report": tmp / "REPRODUCTION.md"}


def test_full_smoke_matrix_then_figures_produces_every_item(full_smoke):
    from figures.checklist import read_verdicts
    from reproduce.matrix.arms import FIGURES, TABLES
    assert "nothing to do" in full_smoke["second"]
    # the driver ends with the checklist's verdicts, one line each, as the figures job wrote them
    verdicts = read_verdicts(full_smoke["results"].parent / "figures" / "checklist.json")
    assert len(verdicts) >= 5
    assert all(f"  [{v.verdict}] {v.question}" in full_smoke["first"] for v in verdicts)
    # the smoke preset runs no headroom control: no world checks are written or printed (they would read FAIL)
    assert not (full_smoke["results"].parent / "figures" / "world_checks.json").exists()
    assert not (full_smoke["out"] / "world_checks.json").exists()
    assert "the world's acceptance checks" not in full_smoke["first"]
    out = full_smoke["out"]
    for name in FIGURES:
        png, pdf = out / f"{name}.png", out / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 2000, name
    for name in TABLES:
        assert "| model | method | source | steps |" in (out / f"{name}.md").read_text(), name
        assert "\\begin{tabular}" in (out / f"{name}.tex").read_text(), name
    report = full_smoke["report"].read_text()
    assert all(f"### Figure {i} " in report for i in range(1, 8)) and all(f"### Table {i} " in report
                                                                          for i in range(1, 4))


def test_full_smoke_figures_have_every_arm_and_panel(full_smoke):
    """Each figure has its panels, and each arm the matrix runs for it is a series, with no 'not run' gap."""
    from test_figures import FIG_PANELS, _axes, _labels, _not_run_texts

    from figures import plots
    from figures.data import load_context
    from reproduce.matrix.arms import build_arms, figure_arms
    from reproduce.matrix.presets import load_preset
    ctx = load_context(full_smoke["results"])
    preset = load_preset("smoke")
    matrix = figure_arms(preset.protocol)
    arms = build_arms(preset)
    canon = lambda a: arms[a].alias_of or a if a in arms else a   # noqa: E731
    for name, panels in FIG_PANELS.items():
        axes = _axes(plots.FIGURES[name](ctx))
        assert list(axes) == panels, name
        # "dapo (stage 1)"
        labels = {canon(lbl.split(" (")[0]) for ax in axes.values() for lbl in _labels(ax)}
        missing = {a for a in matrix[name] if canon(a) not in labels}   # an alias stands for its arm
        assert not missing, (name, missing)
        for panel, ax in axes.items():
            assert not _not_run_texts(ax), (name, panel)
            assert ax.lines or ax.patches, (name, panel)     # something is drawn


def test_full_smoke_tables_equal_the_results_table(full_smoke):
    from test_figures import _num, _parse_md

    from figures import tables
    from figures.data import load_context
    ctx = load_context(full_smoke["results"])
    raw = pd.read_parquet(full_smoke["results"])
    methods = {"table1": ["DAPO", "+ARMOR", "QAE", "+ARMOR"], "table2": ["DAPO", "+ARMOR", "QAE", "+ARMOR"],
               "table3": ["OPD", "MOPD", "ARMOR"]}
    for name, expect in methods.items():
        t = tables.build_table(ctx, name)
        kind = tables.columns_for(ctx, name)[0]
        md = _parse_md((full_smoke["out"] / f"{name}.md").read_text())
        assert [r["method"] for r in md] == expect, name
        for row, cells in zip(t.rows, md):
            assert row.steps_by_seed, (name, row.method)
            for bench in t.columns:
                r = raw[(raw.arm == row.arm) & (raw.benchmark == bench) & (raw.source == "eval")
                        & raw.metric.str.startswith(f"{kind}@")]
                r = r[[row.steps_by_seed.get(int(s)) == int(st) for s, st in zip(r.seed, r.step)]]
                assert r["metric"].nunique() == 1, (name, bench, sorted(r["metric"].unique()))
                value, _ = _num(cells[t.header(bench)])
                assert value == round(r.groupby("seed")["value"].mean().mean() * 100,
                                      2), (name, row.method, bench)

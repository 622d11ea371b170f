"""figures/: every paper item is drawn from a synthetic runs folder, numbers match the results table, gaps are
marked instead of crashing, the checklist verdicts follow the curves, the report mentions everything."""
from __future__ import annotations

import json
import math
from pathlib import Path
import re

import pandas as pd
import pytest

from figures import build, checklist, claims, plots, report, tables
from figures.__main__ import main as figures_main
from figures.data import load_context, load_results, paper_preset
from figures.synthetic import ALL_ARMS, make_synthetic
from reproduce.matrix.claims import load_register, parse_register, register_meta

ROOT = Path(__file__).resolve().parents[2]

FIG_PANELS = {"fig1": ["reward", "length", "validation"], "fig2": ["a", "b"], "fig3": ["a", "b", "c"],
              "fig4": ["a"], "fig5": ["a"], "fig6": ["a"], "fig7": ["a"]}


# ------------------------------------------------------------------------------------------ fixtures
def _register(arms=ALL_ARMS, register=None) -> dict:
    """The claims register as the driver records it for a preset whose matrix is `arms`."""
    reg = register or load_register().bound("armor_restart", True)      # tiny's headline arm
    return register_meta(reg, runs={a: [0, 1] for a in arms})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_synthetic(tmp_path_factory.mktemp("w") / "runs" / "tiny", claims=_register())


@pytest.fixture(scope="module")
def ctx(tiny):
    return load_context(tiny)


@pytest.fixture(scope="module")
def drawn(tiny, tmp_path_factory):
    """python -m figures on the tiny results, with the report."""
    out = tmp_path_factory.mktemp("out")
    dpi, plots.DPI = plots.DPI, 50  # small PNGs: the test is about content, not looks
    rc = figures_main(["--results", str(tiny), "--out", str(out / "figs"), "--report",
                       str(out / "REPRODUCTION.md"), "--command", "python -m reproduce tiny", "--wall-time-s",
                       "3725", "--seeds", "0,1"])
    plots.DPI = dpi
    assert rc == 0
    return out


def _labels(ax) -> list[str]:
    return [lbl for lbl in ax.get_legend_handles_labels()[1] if not lbl.startswith("_")]


def _axes(fig) -> dict:
    return {ax.get_gid().split(":")[1]: ax for ax in fig.axes if ax.get_gid()}


def _not_run_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts if t.get_text().startswith("not run")]


def _parse_md(md: str) -> list[dict]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows, model = [], ""
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        row = dict(zip(head, cells))
        model = row["model"] or model
        row["model"] = model
        rows.append(row)
    return rows


CELL_RE = re.compile(r"^(-?\d+\.\d+)(?: ± (\d+\.\d+))?(?: \(([+−])(\d+\.\d+)\))?$")


def _num(cell: str):
    m = CELL_RE.match(cell)
    if not m:
        return None, None
    delta = None if m.group(3) is None else float(m.group(4)) * (1 if m.group(3) == "+" else -1)
    return float(m.group(1)), delta


def _spread(cell: str):
    m = CELL_RE.match(cell)
    return None if not m or m.group(2) is None else float(m.group(2))


# ------------------------------------------------------------------------------------------ outputs
def test_cli_produces_every_item(drawn):
    figs = drawn / "figs"
    for name in FIG_PANELS:
        png, pdf = figs / f"{name}.png", figs / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 2000, name
    for name in ("table1", "table2", "table3"):
        assert "| model | method | source | steps |" in (figs / f"{name}.md").read_text()
        tex = (figs / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in tex and "\\bottomrule" in tex
    verdicts = json.loads((figs / "checklist.json").read_text())
    assert [v["key"] for v in verdicts] == [c.key for c in load_register().claims]
    assert (figs / "claims.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (figs / "claims.pdf").is_file()


def test_only_subset(tiny, tmp_path):
    assert figures_main(["--results", str(tiny), "--out", str(tmp_path), "--only", "fig4,table1"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig4.pdf", "fig4.png", "table1.md", "table1.tex"]
    assert figures_main(["--results", str(tiny), "--out", str(tmp_path), "--only", "fig9"]) == 2


def test_a_damaged_results_file_is_one_error_naming_it(tiny, tmp_path, capsys):
    """A truncated results.parquet, or a results.meta.json cut short beside a whole one: exit 2 and one line
    naming the file, not pyarrow's or json's traceback."""
    import shutil
    d = tmp_path / "runs"
    shutil.copytree(tiny.parent, d)
    table, meta = d / tiny.name, d / "results.meta.json"
    whole = table.read_bytes()
    table.write_bytes(whole[: len(whole) // 2])
    assert figures_main(["--results", str(table), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {table}: cannot be read (") and err.count("\n") == 1
    assert "damaged or truncated" in err
    table.write_bytes(whole)
    meta.write_text(meta.read_text()[:100])
    assert figures_main(["--results", str(table), "--out", str(tmp_path / "b"), "--only", "fig4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {meta}: cannot be read (") and err.count("\n") == 1


def test_figures_have_expected_panels_and_series(ctx):
    expect = {
        ("fig1", "reward"): ["dapo"], ("fig1", "length"): ["dapo"],
        # ARMOR: the claims register's role (armor_restart, after the run it restarts from)
        ("fig1", "validation"): ["dapo", "dapo_cont", "anchor_only", "armor_reset_never", "armor_restart"],
        ("fig2", "a"): ["dapo_cont", "kl_k3_b1e-2", "kl_k3_b1"],
        ("fig3", "a"): ["dapo_cont", "mix_a0.9", "mix_a0.8"],
        ("fig3", "b"): ["anchor_only", "anchor_static_clip", "anchor_offpolicy"],
        ("fig3", "c"): ["armor", "dapo_cont", "armor_late", "dapo_late"],
        ("fig4", "a"): ["armor_reset_never", "armor_reset_20", "armor_reset_40"],
        ("fig5", "a"): ["dapo_cont", "kl_k2_b1e-2", "kl_k2_b1"],
        ("fig6", "a"): ["qae", "qae_cont", "qae_armor_reset_never", "qae_armor_reset_20"],
        ("fig7", "a"): ["dapo_cont", "armor_tau1", "armor_tau1_until40", "clip_expand"],
    }
    for name, panels in FIG_PANELS.items():
        fig = plots.FIGURES[name](ctx)
        axes = _axes(fig)
        assert list(axes) == panels and len(fig.axes) == len(panels), name
        for panel, ax in axes.items():
            if (name, panel) in expect:
                assert set(expect[(name, panel)]) <= set(_labels(ax)), (name, panel, _labels(ax))
            assert not _not_run_texts(ax), (name, panel)
            if panel not in ("reward", "length", "b"):
                assert "tiny_val avg@4" in ax.get_ylabel()  # benchmark taken from the data
            assert not any(lbl.startswith("paper:") for lbl in _labels(ax))  # no overlay on tiny
        assert "preset tiny" in fig._suptitle.get_text()
    # θ* and the late start are marked
    fig3 = _axes(plots.fig3(ctx))
    assert {"θ* (step 30)", "late start (step 45)"} <= set(_labels(fig3["c"]))
    # Fig. 2b: one pair of bars per arm, read at the protocol's N
    b = _axes(plots.fig2(ctx))["b"]
    assert [t.get_text() for t in b.get_xticklabels()] == ["dapo_cont", "kl_k3_b1e-2", "kl_k3_b1"]
    assert len(b.patches) == 6 and "after 20 stage-2 steps" in b.get_title()


def test_kl_readoff_step(ctx):
    arms = ["dapo_cont", "kl_k3_b1"]
    n, how, vals = plots.kl_readoff(ctx, arms)
    assert n == 20 and "protocol" in how
    m = ctx.metrics("kl_k3_b1")
    assert vals["kl_k3_b1"]["reverse"][0] == pytest.approx(m[m["local_step"] == 20]["kl_reverse"].mean())
    assert vals["kl_k3_b1"]["reverse"][0] < vals["dapo_cont"]["reverse"][0]
    assert plots.kl_readoff(ctx, arms, n=7)[0] == 7
    ctx2 = load_context(ctx.results_path, protocol={"kl_after_steps": 10_000})
    n2, how2, _ = plots.kl_readoff(ctx2, arms)
    assert n2 == 60 and how2.startswith("last common step")
    # metrics steps are shifted to total steps by the run's step_offset
    assert ctx.metrics("armor")["step"].min() == 31 and ctx.metrics("dapo")["step"].min() == 1


# ------------------------------------------------------------------------------------------ tables
def _at(d, arm, steps, bench, metric):
    """Rows of `arm`'s eval of `bench`/`metric` at each seed's step of `steps` ({seed: step})."""
    r = d[(d.arm == arm) & (d.benchmark == bench) & (d.metric == metric) & (d.source == "eval")]
    return r[[steps.get(int(seed)) == int(step) for seed, step in zip(r.seed, r.step)]]


def _expected_cell(ctx, arm, steps, bench, metric):
    return round(_at(ctx.df, arm, steps, bench, metric).groupby("seed")["value"].mean().mean() * 100, 2)


def test_table_numbers_equal_results(ctx, tiny):
    raw = pd.read_parquet(tiny)
    for name, kind in (("table1", "avg"), ("table2", "pass")):
        t = tables.build_table(ctx, name)
        md_rows = _parse_md(t.to_markdown())
        # +ARMOR: the claims register's ARMOR (tiny: the restart), the in-run reset beside it
        assert [r["method"] for r in md_rows] == ["DAPO", "+ARMOR", "+ARMOR (in-run reset)", "QAE", "+ARMOR"]
        assert [r.arm for r in t.rows][:3] == ["dapo", "armor_restart", "armor"]
        for row, md in zip(t.rows, md_rows):
            assert row.source == md["source"] == "ours"
            # each seed's checkpoint is its own best-validation eval step
            assert sorted(row.steps_by_seed) == [0, 1]
            for seed, step in row.steps_by_seed.items():
                view = ctx.for_seed(seed)
                vc = view.val_curve(row.arm)
                eval_steps = set(view.eval_rows(row.arm)["step"])
                assert step == -max((v, -s) for s, v in zip(vc.step, vc.mean) if s in eval_steps)[1]
            bench_vals = []
            for col, bench in (("AIME24", "aime24"), ("AIME25", "aime25"), ("AMC", "amc")):
                metric = "avg@32" if kind == "avg" else "pass@16"
                value, _ = _num(md[col])
                exp = _expected_cell(ctx, row.arm, row.steps_by_seed, bench, metric)
                assert value == exp, (name, row.method, col)
                # straight from the parquet file, without our loader
                r = _at(raw, row.arm, row.steps_by_seed, bench, metric)
                assert value == round(r["value"].mean() * 100, 2)
                # the spread: standard deviation over the seeds (n - 1), the synthetic results have two
                per_seed = r.groupby("seed")["value"].mean() * 100
                assert len(per_seed) == 2 and _spread(md[col]) == round(per_seed.std(ddof=1), 2)
                bench_vals.append(value)
            avg_col = "math avg" if kind == "avg" else "avg"
            assert _num(md[avg_col])[0] == pytest.approx(sum(bench_vals) / 3, abs=0.011)
            if kind == "avg":
                assert _num(md["GPQA"])[0] == _expected_cell(ctx, row.arm, row.steps_by_seed, "gpqa_diamond",
                                                             "avg@8")
        # deltas are differences of printed values, against the row's baseline
        base, arm_row = md_rows[0], md_rows[1]
        v, d = _num(arm_row["AIME24"])
        assert d == pytest.approx(v - _num(base["AIME24"])[0], abs=1e-9)
        steps = t.rows[1].steps_by_seed
        assert set(t.rows[0].steps_by_seed.values()) == {30}           # θ*: one step for every seed
        assert base["steps"] == "30"
        assert arm_row["steps"] == ("/".join(f"+{steps[s] - 30}" for s in (0, 1)) if steps[0] != steps[1]
                                    else f"+{steps[0] - 30}")


def test_seeds_evaluated_at_different_checkpoints_all_count(ctx, tiny):
    """Each seed is evaluated at its own best checkpoint: a row averages every seed at its own step (an arm
    whose seeds chose different steps once showed one seed's value, without a spread), and the steps column
    says so."""
    d = pd.read_parquet(tiny)
    ev = (d.source == "eval") & (d.arm == "opd")
    keep = ~ev | ((d.seed == 0) & (d.step == 40)) | ((d.seed == 1) & (d.step == 60))
    c = load_context(d[keep].reset_index(drop=True), runs_dir=ctx.runs_dir)
    t3 = tables.build_table(c, "table3")
    opd = t3.rows[0]
    assert (opd.method, opd.steps_by_seed, opd.seeds) == ("OPD", {0: 40, 1: 60}, [0, 1])
    assert opd.steps == "+10/+30"
    cell = opd.cells["aime24"]
    r = _at(d, "opd", {0: 40, 1: 60}, "aime24", "avg@32")
    assert len(r) == 2 and cell.value == round(r["value"].mean() * 100, 2) and cell.spread is not None
    assert "arm `opd` at steps 40 (seed 0), 60 (seed 1)" in " ".join(t3.notes)


def test_delta_format():
    assert tables.Cell(43.04, 5.91).text() == "43.04 (+5.91)"
    assert tables.Cell(43.04, 5.91, spread=1.5).text() == "43.04 ± 1.50 (+5.91)"
    assert tables.Cell(39.02, -1.2).text() == "39.02 (−1.20)"
    assert tables.Cell(None, note=2).text() == "— [2]"


def test_paper_preset_overlay_and_paper_rows(tmp_path):
    path = make_synthetic(tmp_path / "runs" / "qwen25-math-7b", preset="qwen25-math-7b",
                          model="Qwen2.5-Math-7B", seeds=[0], val_bench="aime24", val_k=32, theta=140,
                          stage1=360, stage2=240, every=20, eval_every=20, late=200, qae_theta=230,
                          kl_after_steps=100, table_steps={"dapo": 140, "armor": 340, "qae": 230,
                                                           "qae_armor_reset_20": 470},
                          arms=["dapo", "dapo_cont", "armor", "anchor_only", "kl_k3_b1", "qae", "qae_cont",
                                "qae_armor_reset_20", "opd"])
    ctx = load_context(path)
    val = _axes(plots.fig1(ctx))["validation"]
    assert "paper: DAPO peak ~0.385 (step 130-140)" in _labels(val)
    assert "aime24 avg@32" in val.get_ylabel()
    b = _axes(plots.fig2(ctx))["b"]
    assert "paper: reverse / forward" in _labels(b)
    t1 = tables.build_table(ctx, "table1")
    rows = _parse_md(t1.to_markdown())
    paper = paper_preset("qwen25-math-7b")["tables"]["table1"]
    prow = [r for r in rows if r["source"] == "paper"]
    assert [r["method"] for r in prow] == ["DAPO", "+ARMOR", "QAE", "+ARMOR"]
    assert _num(prow[0]["AIME24"]) == (37.13, None)
    assert _num(prow[1]["AIME24"]) == (paper["dapo_armor"]["aime24"], 5.91)
    assert prow[1]["steps"] == "+200" and prow[3]["MMLU-Pro"] == "42.15 (−1.15)"
    # paper steps: DAPO 140 and ARMOR 140+200 were evaluated, QAE's 230 was not (eval every 20 from 230)
    ours = [r for r in t1.rows if r.source == "ours"]
    assert ((ours[0].steps_by_seed, ours[0].how) == ({0: 140}, "paper step")
            and ours[1].steps_by_seed == {0: 340})
    assert ours[1].cells["aime24"].value == _expected_cell(ctx, "armor", {0: 340}, "aime24", "avg@32")
    t3 = tables.build_table(ctx, "table3")
    assert [(r.method, r.source) for r in t3.rows] == [("OPD", "ours"), ("OPD", "paper"), ("MOPD", "ours"),
                                                     ("MOPD", "paper"), ("ARMOR", "ours"), ("ARMOR", "paper")]
    mopd = t3.rows[2]
    assert all(c.value is None and c.note for c in mopd.cells.values())
    assert any("not run: mopd" in f for f in t3.footnotes)


def test_generic_benchmarks_get_their_own_columns(tmp_path):
    path = make_synthetic(tmp_path / "runs" / "smoke", preset="smoke", arms=["dapo", "dapo_cont", "armor"],
                          seeds=[0], eval_benches=("toy_add", "toy_mul"), write_metrics=False)
    ctx = load_context(path)
    t = tables.build_table(ctx, "table1")
    assert t.columns == ["toy_add", "toy_mul", "avg"]
    md = _parse_md(t.to_markdown())
    a, m, avg = (_num(md[1][c])[0] for c in ("toy_add", "toy_mul", "avg"))
    assert avg == pytest.approx((a + m) / 2, abs=0.011)


# ------------------------------------------------------------------------------------------ gaps
def test_missing_arms_leave_marked_gaps(tmp_path):
    keep = [a for a in ALL_ARMS if a not in ("kl_k3_b1", "armor", "armor_restart", "mopd", "opd",
                                             "armor_reset_never") and not a.startswith("qae")]
    path = make_synthetic(tmp_path / "runs" / "tiny", arms=keep, claims=_register())
    ctx = load_context(path)
    f2 = _axes(plots.fig2(ctx))
    assert "kl_k3_b1" not in _labels(f2["a"]) and any("kl_k3_b1" in t for t in _not_run_texts(f2["a"]))
    assert any("kl_k3_b1" in t for t in _not_run_texts(f2["b"]))
    f1 = plots.fig1(ctx)
    assert f1.armor_info["missing"]["validation"] == ["armor"]
    f6 = _axes(plots.fig6(ctx))["a"]  # nothing of QAE at all: the whole panel says so
    assert not _labels(f6) or all(lbl.startswith("θ") for lbl in _labels(f6))
    assert _not_run_texts(f6) and "qae" in _not_run_texts(f6)[0]
    t1 = tables.build_table(ctx, "table1")
    armor_row = t1.rows[1]
    assert armor_row.method == "+ARMOR" and armor_row.steps == "—"
    md = _parse_md(t1.to_markdown())
    assert md[1]["AIME24"].startswith("—") and "[1]" in md[1]["AIME24"]
    assert "[1] tiny-lm +ARMOR: not run: armor_restart" in t1.to_markdown()
    assert "tiny-lm +ARMOR (in-run reset): not run: armor" in t1.to_markdown()
    assert len(t1.rows) == 3  # +ARMOR, its in-run row; no QAE arm in the data, tiny no paper preset: no QAE
    verdicts = {v.key: v for v in claims.run_claims(ctx)}
    # ARMOR's restart continues armor_reset_never's run, which is missing: not run
    v = verdicts["armor_above_dapo_cont"]
    assert v.verdict == "not run" and "armor_reset_never" in v.evidence and "not run" in v.evidence
    assert verdicts["mixture_adds_over_anchors"].verdict == "not run"
    assert verdicts["mopd_below_armor"].verdict == "not run"
    assert verdicts["dapo_collapses"].verdict == "inconclusive"          # no noise floor in the synthetic
    assert verdicts["dapo_collapses"].reason == "noise floor not measured"


def test_the_drivers_arms_decide_what_a_sweep_expects(tmp_path):
    """results.meta.json's arms (the driver's collect writes them, with each sweep's family and value) decide
    a sweep's members and order: an arm listed there but absent from the data is marked not run; no arm name
    is parsed."""
    keep = [a for a in ALL_ARMS if a != "kl_k3_b1"]
    path = make_synthetic(tmp_path / "runs" / "tiny", arms=keep)
    meta_path = path.with_name("results.meta.json")
    meta = json.loads(meta_path.read_text())
    assert load_context(path).expected_arms("kl_k3") == ["kl_k3_b1e-2", "kl_k3_b1"]   # β order; b1 not run
    del meta["arms"]["kl_k3_b1"]
    meta["arms"]["kl_k3_b5e-1"] = {"stage": 2, "baseline": "dapo", "start": "peak",
                                   "sweep": {"family": "kl_k3", "value": 0.5}}
    meta["arms"]["mix_a0.7"] = {"stage": 2, "baseline": "dapo", "start": "peak",
                                "sweep": {"family": "mix", "value": 0.7}}
    meta_path.write_text(json.dumps(meta))
    ctx = load_context(path)
    assert ctx.expected_arms("kl_k3") == ["kl_k3_b1e-2", "kl_k3_b5e-1"]
    assert ctx.expected_arms("mix") == ["mix_a0.9", "mix_a0.8", "mix_a0.7"]          # α: largest first
    assert ctx.expected_arms("reset") == ["armor_reset_never", "armor_reset_20", "armor_reset_40"]



def test_the_drivers_panels_decide_what_a_figure_draws(tmp_path):
    """results.meta.json's figure_panels (the driver's collect writes them, reproduce/matrix/arms.py) decide a
    panel's arms and their order: a listed arm absent from the data is marked not run; results collected
    without the panels say so on every validation panel."""
    keep = [a for a in ALL_ARMS if a != "kl_k3_b1"]
    path = make_synthetic(tmp_path / "runs" / "tiny", arms=keep)
    meta_path = path.with_name("results.meta.json")
    meta = json.loads(meta_path.read_text())
    arms = lambda ax: [x for x in _labels(ax) if not x.startswith(("θ", "dapo (stage"))]  # noqa: E731
    assert arms(_axes(plots.fig2(load_context(path)))["a"]) == ["dapo_cont", "kl_k3_b1e-2"]
    meta["figure_panels"]["fig2"]["a"] = ["kl_k3_b1e-2", "kl_k3_b5e-1", "dapo_cont"]
    meta_path.write_text(json.dumps(meta))
    ax = _axes(plots.fig2(load_context(path)))["a"]
    texts = _not_run_texts(ax)
    assert texts and "kl_k3_b5e-1" in texts[0] and "kl_k3_b1," not in texts[0] + ","
    assert arms(ax) == ["kl_k3_b1e-2", "dapo_cont"]
    del meta["figure_panels"]
    meta_path.write_text(json.dumps(meta))
    ax = _axes(plots.fig2(load_context(path)))["a"]
    assert any("lists no figure_panels" in t for t in _not_run_texts(ax))
    reward = _axes(plots.fig1(load_context(path)))["reward"]
    assert any("lists no figure_panels" in t for t in _not_run_texts(reward))


def test_the_validation_benchmark_is_the_drivers(tmp_path):
    """One rule for "the validation benchmark": the driver's (results.meta.json); aime24 first only without
    it."""
    df = pd.DataFrame([dict(preset="tiny", model="m", arm="dapo", seed=0, step=s, benchmark=b, metric="avg@4",
                            k=4, value=0.1, n=4,
                            source="validation") for s in (0, 5) for b in ("aime24", "toy_val")])
    path = tmp_path / "results.parquet"
    df.to_parquet(path)
    assert load_context(path).val_benchmark == "aime24"
    (tmp_path / "results.meta.json").write_text(json.dumps({"validation_benchmark": "toy_val"}))
    assert load_context(path).val_benchmark == "toy_val"


def test_nearly_empty_results_do_not_crash(tmp_path):
    df = pd.DataFrame([dict(preset="tiny", model="m", arm="dapo", seed=0, step=s, benchmark="v",
                            metric="avg@4", k=4, value=0.1 * s, n=4, source="validation") for s in (0, 5)])
    path = tmp_path / "results.parquet"
    df.to_parquet(path)
    out = tmp_path / "out"
    ctx = load_context(path)
    produced = build.draw_all(ctx, out, only=["fig6", "table1", "table3", "checklist"])
    assert all(p.exists() for ps in produced.values() for p in ps)
    assert "—" in (out / "table1.md").read_text()
    for name, fn in plots.FIGURES.items():  # every figure builds, with its gaps marked
        fig = fn(ctx)
        assert any(fig.armor_info["missing"].values()), name


# ------------------------------------------------------------------------------------------ checklist
def _noise(d, sd):
    d.mkdir(parents=True, exist_ok=True)
    vals = [0.5 - sd, 0.5 + sd]
    (d / "noise_floor.json").write_text(json.dumps({"values": vals, "sd": sd, "range": 2 * sd, "mean": 0.5,
                                                    "arm": "dapo", "seed": 0, "step": 10}))


def _entry(key, quantity, arms, direction="greater", split="validation", **kw) -> dict:
    return {"key": key, "paper": "p", "claim": f"claim {key}", "quantity": quantity, "arms": arms,
            "direction": direction, "split": split, **kw}


def _table(d, curves, evals=(), entries=(), protocol=None):
    """results.parquet of {(arm, seed): [values at steps 10, 15, ...]} (stage-2 arms from θ* = step 10), and
    the register `entries` as the driver records them."""
    rows = [dict(preset="tiny", model="m", arm=arm, seed=seed, step=10 + 5 * i, benchmark="val",
                 metric="avg@4", k=4, value=v, n=4, source="validation") for (arm, seed),
            vals in curves.items()
            for i, v in enumerate(vals)]
    rows += [dict(preset="tiny", model="m", arm=arm, seed=seed, step=step, benchmark="test", metric="avg@4",
                  k=4, value=v, n=4, source="eval") for arm, seed, step, v in evals]
    d.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(d / "results.parquet")
    # the driver's record of the arms (results.meta.json): stage-1 baselines start at 0, the rest at θ* = 10
    arms = {a for a, _ in curves} | {a for a, *_ in evals}
    sweeps = {"armor_reset_never": ("reset", None), "armor_reset_10": ("reset", 10.0),
              "armor_reset_40": ("reset", 40.0), "kl_k3_b1": ("kl_k3", 1.0)}
    facts = {a: {"stage": 1, "baseline": a, "start": "base"} if a in ("dapo", "qae") else
             {"stage": 2, "baseline": "dapo", "start": "peak", "starts": {str(s): 10 for s in range(5)},
              "sweep": {"family": sweeps[a][0], "value": sweeps[a][1]} if a in sweeps else None}
             for a in arms}
    meta = {"arms": facts, "protocol": protocol or {}}
    if entries:
        meta["claims"] = register_meta(parse_register({"claims": list(entries)}), runs={a: [0] for a in arms})
    (d / "results.meta.json").write_text(json.dumps(meta))
    return d / "results.parquet"


HOLDS = _entry("armor_holds", "end_diff", ["armor", "dapo_cont"])


def _one(path, key=None):
    vs = claims.run_claims(load_context(path))
    return vs[0] if key is None else next(v for v in vs if v.key == key)


def test_a_verdict_needs_its_interval_and_the_noise_floor(tmp_path):
    """ARMOR vs dapo_cont, 3 seeds: yes only with a measured floor, an interval above 0 and a gap >= 2
    floors."""
    start = [0.5] * 3
    gaps = {0: 0.10, 1: 0.12, 2: 0.11}
    curves = {**{("dapo_cont", s): start + [0.2] * 3 for s in gaps},
              **{("armor", s): start + [0.2 + g] * 3 for s, g in gaps.items()}}
    path = _table(tmp_path / "a", curves, entries=[HOLDS])
    v = _one(path)
    assert v.verdict == "inconclusive" and v.reason == "noise floor not measured" and v.floor is None
    assert v.stat["n"] == 3 and v.stat["mean"] == pytest.approx(0.11) and v.stat["lo"] > 0
    _noise(tmp_path / "a", 0.01)
    v = _one(path)
    assert v.verdict == "yes" and v.floor == 0.01 and v.min_effect == pytest.approx(0.02)
    assert v.numbers["per_seed"] == pytest.approx(gaps)
    line = checklist.verdict_lines([v])[0]
    assert line.startswith("  [yes] ") and "95% t interval [+" in line and "3 seeds" in line and \
        "noise floor 0.010" in line
    _noise(tmp_path / "a", 0.06)                 # the gap 0.11 < 2 x 0.06: below the noise multiple
    assert _one(path).verdict == "inconclusive"
    wide = {**curves, ("armor", 2): start + [0.05] * 3}    # one seed the other way: the interval holds 0
    _noise(tmp_path / "b", 0.01)
    assert _one(_table(tmp_path / "b", wide, entries=[HOLDS])).verdict == "inconclusive"
    worse = {**{k: v for k, v in curves.items() if k[0] == "dapo_cont"},
             **{("armor", s): start + [0.2 - g] * 3 for s, g in gaps.items()}}
    _noise(tmp_path / "c", 0.01)
    assert _one(_table(tmp_path / "c", worse, entries=[HOLDS])).verdict == "no"


def test_resets_are_compared_after_their_first_reset(tmp_path):
    """A reset arm equals never up to θ* + τ; its peak there (the shared start) decides nothing; without a
    point after the reset the entry is not testable, never "no"."""
    never = [0.5, 0.45, 0.40, 0.35, 0.30, 0.25, 0.20]            # steps 10..40
    higher = never[:3] + [0.42, 0.41, 0.40, 0.39]                  # reset at τ = 10 (step 20) helps
    curves = {**{("armor_reset_never", s): never for s in (0, 1, 2)},
              **{("armor_reset_10", s): [x + 0.002 * s for x in higher] for s in (0, 1, 2)}}
    entries = [_entry(f"reset_{t}", "peak_after_diff", [f"armor_reset_{t}", "armor_reset_never"])
               for t in (10, 40)]
    d = tmp_path / "r"
    _noise(d, 0.01)
    v = _one(_table(d, curves, entries=entries[:1]))
    assert v.verdict == "yes" and v.numbers["windows"][0] == [25, 30, 35, 40]
    late = {**curves, **{("armor_reset_40", s): never for s in (0, 1, 2)}}   # τ = 40: no point after step 50
    d2 = tmp_path / "r2"
    _noise(d2, 0.01)
    v = _one(_table(d2, {k: v for k, v in late.items() if k[0] != "armor_reset_10"}, entries=entries[1:]))
    assert v.verdict == "not testable here" and "no validation point after its first reset" in v.evidence


def test_opd_whose_weights_are_theta_star_is_not_testable(tmp_path):
    """OPD's eval rows equal dapo's at θ* bit for bit: "not testable here"; MOPD is still compared."""
    flat = [0.5] * 4
    curves = {("dapo", s): [0.4, 0.5, 0.3] for s in (0, 1)} | {(a, s): flat for a in ("armor", "opd", "mopd")
                                                                for s in (0, 1)}
    evals = [("dapo", s, 15, 0.60 + s / 100) for s in (0, 1)] + [("opd", s, 15, 0.60 + s / 100)
                                                                 for s in (0, 1)]
    evals += [("armor", s, 15, 0.70 + s / 100) for s in (0, 1)] + [("mopd", s, 15, 0.55 + s / 50)
                                                                   for s in (0, 1)]
    entries = [_entry(f"{x}_below_armor", "eval_diff", ["armor", x], split="test", at="best")
               for x in ("opd", "mopd")]
    d = tmp_path / "o"
    _noise(d, 0.01)
    path = _table(d, curves, evals, entries)
    v = _one(path, "opd_below_armor")
    assert v.verdict == "not testable here" and "weights are θ*" in v.evidence
    v = _one(path, "mopd_below_armor")
    assert v.verdict == "yes" and v.numbers["per_seed"] == pytest.approx({0: 0.15, 1: 0.14})


def test_checklist_reads_metrics_from_the_steps_table(tmp_path):
    """The per-step metrics come from the driver's per-step table (steps.parquet)."""
    from common.results import steps_frame
    flat = [0.5, 0.5, 0.51, 0.49, 0.5, 0.5]
    curves = {("kl_k3_b1", s): flat for s in (0, 1, 2)} | {("dapo_cont", s): [0.5, 0.3, 0.2, 0.1, 0.1, 0.1]
                                                            for s in (0, 1, 2)}
    d = tmp_path / "s"
    entries = [_entry("beta1_stagnates", "end_minus_theta", ["kl_k3_b1"], "no_change"),
               _entry("kl", "kl_contrast", ["kl_k3_b1", "dapo_cont"], "less", "train")]
    path = _table(d, curves, entries=entries, protocol={"kl_after_steps": 3})
    _noise(d, 0.02)
    rows = [{"arm": arm, "seed": s, "step": 10 + i, "local_step": i, "kl_reverse": kl * (1 + s),
             "kl_forward": 0.1, "accuracy": 0.5}
            for s in (0, 1, 2) for i in range(1, 6) for arm, kl in (("kl_k3_b1", 0.001), ("dapo_cont", 0.5))]
    steps_frame(rows).to_parquet(d / "steps.parquet")
    ctx = load_context(path)
    assert ctx.metrics("kl_k3_b1")["kl_reverse"].tolist()[:2] == pytest.approx([0.001, 0.001])
    v = {x.key: x for x in claims.run_claims(ctx)}
    assert v["beta1_stagnates"].verdict == "yes" and v["beta1_stagnates"].stat["n"] == 3
    # log(0.001 / 0.5) − log(0.1 / 0.1) on every seed (the seed's factor cancels)
    assert v["kl"].numbers["per_seed"] == pytest.approx({s: math.log(0.002) for s in (0, 1, 2)})
    assert v["kl"].verdict == "yes"


def test_checklist_on_the_committed_tiny_results():
    """The committed results, decided by the register their record carries: every entry, OPD not testable,
    nothing crashes; the design seeds adjust nothing."""
    path = ROOT / "reproduce" / "results" / "tiny" / "results.parquet"
    ctx = load_context(path)
    verdicts = {v.key: v for v in claims.run_claims(ctx)}
    assert list(verdicts) == [e["key"] for e in ctx.claims["entries"]]     # the register it was decided with
    assert len(verdicts) == 37 and all(v.p_adjusted is None for v in verdicts.values())
    assert verdicts["opd_below_armor"].verdict == "not testable here"
    assert "teacher is its start" in verdicts["opd_below_armor"].evidence


# ------------------------------------------------------------------------------------------ report
def test_report_mentions_every_item(drawn):
    md = (drawn / "REPRODUCTION.md").read_text()
    assert md.startswith("<!-- GENERATED FILE") and "Do not edit by hand" in md
    for name, title in report.FIGURE_TITLES.items():
        assert title in md and f"![{name}](figs/{name}.png)" in md
    for t in ("Table 1", "Table 2", "Table 3"):
        assert f"### {t}" in md
    assert "python -m reproduce tiny" in md and "1h 02m 05s" in md and "| seeds | 0, 1 |" in md
    # no floor here
    assert "Checklist" in md and "**inconclusive**" in md and "Noise floor: not measured" in md
    # it opens with the forest plot of every entry, then a sentence each, then the run
    assert (md.index("## Claims of the paper") < md.index("![claims](figs/claims.png)")
            < md.index("## The run"))
    assert "- **undecided here** — stage-1 DAPO falls from θ* by the end of stage 1" in md
    assert "## Per-step evidence" in md and "![steps](figs/steps.png)" in md
    assert "Paper's table for reference" in md and "37.13" in md  # tiny: the paper's numbers beside ours


def test_report_module_cli(tiny, tmp_path):
    out = tmp_path / "rep" / "REPRODUCTION.md"
    figdir = tmp_path / "rep" / "figures"
    figdir.mkdir(parents=True)
    for n in plots.FIGURES:  # present figures are not redrawn
        (figdir / f"{n}.png").write_bytes(b"x")
    assert report.main(["--results", str(tiny), "--out", str(out), "--figures-dir", str(figdir),
                        "--command", "cmd", "--preset", "tiny"]) == 0
    md = out.read_text()
    assert "![fig7](figures/fig7.png)" in md and (figdir / "table1.md").exists()


# ------------------------------------------------------------------------------------------ helpers
def test_helpers(tmp_path):
    from reproduce.matrix.arms import fmt_beta      # arm names are the driver's
    assert [fmt_beta(b) for b in (1e-3, 1e-2, 0.1, 1.0, 0.05)] == ["1e-3", "1e-2", "1e-1", "1", "5e-2"]
    df = pd.DataFrame([dict(preset="p", model="m", arm="dapo", seed=0, step=0, benchmark="b", metric="avg@4",
                            k=4, value=v, n=4, source="validation") for v in (38.5, 40.0)])
    assert load_results(df)["value"].tolist() == [0.385, 0.4]  # percent -> fraction
    with pytest.raises(ValueError):
        load_results(df.drop(columns=["source"]))


def test_the_restart_is_compared_after_its_restart_point(tmp_path):
    """armor_restart equals armor_reset_never at its restart point: only the steps after it count."""
    rows = []
    for seed in (0, 1, 2):
        for step, v in ((15, 0.5), (25, 0.55), (35, 0.6), (45, 0.5), (55, 0.45)):
            rows.append(("armor_reset_never", seed, step, v))
        # restarts at 35 (never's best): equal there, higher after it by 0.1 + 0.01 * seed
        for step, v in ((35, 0.6), (45, 0.7 + 0.01 * seed), (55, 0.65)):
            rows.append(("armor_restart", seed, step, v))
    df = pd.DataFrame([dict(preset="t", model="m", arm=a, seed=s, step=st, benchmark="toy_val",
                            metric="avg@4", k=4, value=v, n=4, source="validation") for a, s, st, v in rows])
    df.to_parquet(tmp_path / "results.parquet")
    facts = {"armor_reset_never": {"stage": 2, "start": "peak", "starts": {str(s): 15 for s in range(3)}},
             "armor_restart": {"stage": 2, "start": "restart", "starts": {str(s): 35 for s in range(3)}}}
    reg = parse_register({"claims": [_entry("restart", "peak_after_diff", ["armor_restart",
                                                                            "armor_reset_never"])]})
    (tmp_path / "results.meta.json").write_text(json.dumps({"arms": facts, "claims": register_meta(reg)}))
    v = _one(tmp_path / "results.parquet")
    assert v.numbers["windows"] == {0: [45, 55], 1: [45, 55], 2: [45, 55]}
    assert v.numbers["per_seed"] == pytest.approx({s: 0.2 + 0.01 * s for s in range(3)})
    assert v.verdict == "inconclusive" and "noise floor not measured" in v.reason   # no floor in this table


def test_compare_two_regimes_prints_classes_and_end_values(tmp_path, capsys):
    """figures.compare on two synthetic results folders (one collapsing, one not): a row a claim, and with
    --ends each arm's end value per seed, equal to the checklist's own end values."""
    from figures.checklist import ends
    from figures.claims import write_checklist
    from figures.compare import main
    from figures.data import load_context
    arms = ["dapo", "dapo_cont", "armor"]
    paths = {name: make_synthetic(tmp_path / name / "tiny", arms=arms, collapse=(name == "a"),
                                  seeds=(0, 1, 2), claims=_register(arms)) for name in ("a", "b")}
    for p in paths.values():
        write_checklist(load_context(p), p.parent / "figures")
    assert main([str(paths[n].parent / "figures" / "checklist.json") for n in ("a", "b")]
                + ["--ends", "armor,dapo_cont"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| claim | tiny | tiny | class |\n")
    assert "| stage-1 DAPO falls from θ* by the end of stage 1 | **" in out
    row = next(line for line in out.splitlines() if line.startswith("| `armor` |"))
    for p, cell in zip(paths.values(), row.split("|")[2:4]):
        e = ends(load_context(p), "armor")
        assert cell.strip().endswith("(" + " / ".join(f"{v:.3f}" for v in e.values()) + ")")


def test_a_titles_seeds_are_listed_up_to_eight_then_counted():
    from figures.plots import seeds_label
    assert seeds_label([0, 1, 2]) == "[0, 1, 2]" and seeds_label([]) == "-"
    assert seeds_label(list(range(100, 126))) == "26 (100-125)"
    assert seeds_label([0, 2, 4, 6, 8, 10, 12, 14, 16]) == "9 (0, ..., 16)"


def test_scorer_rows_best_at_k_and_the_amc_column(tmp_path):
    """An evaluation graded by two scorers (the paper protocol) gives an "ours (math_verify)" row from its
    /math_verify metrics, Table 2 an "ours (best@k)" row (verl's bootstrap), and AMC shows amc23 over amc."""
    from common.results import write_results
    path = make_synthetic(tmp_path / "runs" / "qwen25-math-7b", preset="qwen25-math-7b",
                          model="Qwen2.5-Math-7B", seeds=[0], val_bench="aime24", val_k=32, theta=140,
                          stage1=360, stage2=240, every=20, eval_every=20, late=200, qae_theta=230,
                          kl_after_steps=100, table_steps={"dapo": 140, "armor": 340}, arms=["dapo", "armor"])
    df = pd.read_parquet(path)
    ev = df[df["source"] == "eval"]
    extra = []
    for metric in ("avg@32", "pass@16"):
        base = ev[ev["metric"] == metric]
        extra.append(base.assign(metric=metric + "/math_verify", value=base["value"] + 0.01))
        if metric == "pass@16":
            extra.append(base.assign(metric="best@16", value=base["value"] - 0.05))
    amc = ev[ev["benchmark"] == "amc"]
    extra.append(amc.assign(benchmark="amc23", value=amc["value"] * 0 + 0.5))
    write_results(path, pd.concat([df, *extra], ignore_index=True))
    meta_path = path.parent / "results.meta.json"                       # the driver's card (collect.py)
    meta = json.loads(meta_path.read_text())
    meta["protocol_card"] = "Protocol `paper`: the card's text"
    meta_path.write_text(json.dumps(meta))
    ctx = load_context(path)
    t1, t2 = tables.build_table(ctx, "table1"), tables.build_table(ctx, "table2")
    ours = {(r.method, r.source): r for r in t1.rows}
    mv = ours[("DAPO", "ours (math_verify)")].cells["aime24"].value
    assert mv == pytest.approx(ours[("DAPO", "ours")].cells["aime24"].value + 1.0, abs=0.011)
    assert ours[("DAPO", "ours")].cells["amc"].value == 50.0            # amc23, not the mean with amc
    t2rows = {(r.method, r.source): r for r in t2.rows}
    best = t2rows[("DAPO", "ours (best@k)")].cells["aime24"].value
    assert best == pytest.approx(t2rows[("DAPO", "ours")].cells["aime24"].value - 5.0, abs=0.011)
    assert ("DAPO", "ours (math_verify)") in t2rows
    md = report.build_report(ctx, tmp_path / "REPRODUCTION.md", "cmd", [0], None, tmp_path / "fig")
    assert "## Protocol card of the final evaluation\n\nProtocol `paper`: the card's text" in md

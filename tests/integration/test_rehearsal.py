"""The CPU rehearsal's label on every output, from a synthetic results folder (seconds, the default suite);
and the CPU rehearsal of both paper DAGs (`run_all.py --rehearse`, reproduce/matrix/rehearsal.py) on the local
SLURM, to the end: every figure (PNG + PDF) and table, each carrying the rehearsal's label, the
substitutions in the report, results.meta.json flagged, and a rerun that submits nothing. Minutes each
(records/rehearsal.md): behind the `rehearsal` marker, outside the default command.

    bash slurm/cluster_up.sh && python -m pytest -m rehearsal tests/integration/test_rehearsal.py
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from figures.plots import FIGURES
from figures.tables import TABLES
from reproduce.matrix import rehearsal
from reproduce.matrix.presets import load_preset

ROOT = Path(__file__).resolve().parents[2]


def test_every_output_of_a_rehearsal_carries_its_label(tmp_path):
    """results.meta.json `rehearsal` (collect writes it) -> the figure's title, watermark and file metadata,
    the table's title, the checklist and the report's first heading with the substitutions; a real run's
    outputs carry none of it."""
    from figures.build import draw_all
    from figures.data import load_context
    from figures.report import rehearsal_header, rehearsal_section
    from figures.synthetic import make_synthetic

    paper = load_preset("qwen25-math-7b")
    subs = rehearsal.substitutions(paper, tmp_path)
    for reh in (True, False):
        path = make_synthetic(tmp_path / str(reh) / "runs" / "p", preset="qwen25-math-7b-rehearsal",
                              seeds=[0],
                              arms=["dapo", "dapo_cont", "armor", "armor_reset_never", "anchor_only"])
        meta_path = path.with_name("results.meta.json")
        meta = json.loads(meta_path.read_text())
        if reh:
            meta["rehearsal"] = {"of": paper.name, "label": rehearsal.LABEL,
                                 "substitutions": [s.to_dict() for s in subs]}
        meta_path.write_text(json.dumps(meta))
        out = tmp_path / str(reh) / "fig"
        draw_all(load_context(path), out, only=["fig4", "table1", "checklist"])
        ctx = load_context(path)
        for f in ("fig4.png", "fig4.pdf", "claims.png", "claims.pdf"):
            assert (rehearsal.LABEL.encode() in (out / f).read_bytes()) is reh, f
        for f in ("table1.md", "table1.tex"):      # (the checklist's: the SLURM test, with a register)
            assert (rehearsal.LABEL in (out / f).read_text()) is reh, f
        head, section = rehearsal_header(ctx), "\n".join(rehearsal_section(ctx))
        assert bool(head) is reh and (rehearsal.LABEL in "\n".join(head)) is reh
        assert all(f"`{s.field}`" in section for s in subs) is reh


def _run(args, timeout):
    r = subprocess.run([sys.executable, "reproduce/run_all.py", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return r.stdout


@pytest.mark.rehearsal
@pytest.mark.slurm
@pytest.mark.timeout(4200)
@pytest.mark.parametrize("paper", list(rehearsal.FAMILIES))
def test_rehearsal_runs_the_whole_dag_on_slurm(paper, tmp_path, slurm_cluster):
    root = tmp_path / "runs"
    args = ["--preset", paper, "--rehearse", "--cluster", "slurm", "--root", str(root), "--no-progress",
            "--poll", "2"]
    out = _run(args, timeout=3600)
    assert out.count(rehearsal.LABEL) >= 2 and "wall time of this command" in out   # first and last lines
    print(next(line for line in out.splitlines() if line.startswith("wall time of this command")))
    name = paper + rehearsal.SUFFIX
    pr = root / name
    reg = json.loads((pr / "_jobs" / "state.json").read_text())
    trains = [v for k, v in reg.items() if k.startswith(("stage1/", "stage2/"))]
    assert trains and all(v["backend"] == "slurm" for v in trains)
    meta = json.loads((pr / "results.meta.json").read_text())
    subs = rehearsal.substitutions(load_preset(paper), root)
    assert meta["rehearsal"]["label"] == rehearsal.LABEL and meta["rehearsal"]["of"] == paper
    assert meta["rehearsal"]["substitutions"] == json.loads(json.dumps([s.to_dict() for s in subs]))
    figs = pr / "figures"
    for f in list(FIGURES) + ["steps", "claims"]:
        for ext in ("png", "pdf"):
            data = (figs / f"{f}.{ext}").read_bytes()
            # drawn across the figure and in its title; the files' metadata (Title) carries it too
            assert len(data) > 1000 and rehearsal.LABEL.encode() in data, f"{f}.{ext}"
    for t in TABLES:
        assert rehearsal.LABEL in (figs / f"{t}.md").read_text() and (figs / f"{t}.tex").is_file()
    assert rehearsal.LABEL in (figs / "checklist.md").read_text()
    report = (pr / "REPRODUCTION.md").read_text()
    assert report.count(rehearsal.LABEL) >= 2           # the header and the tables
    head = report.split("# ARMOR reproduction")[0]
    assert rehearsal.LABEL in head
    for s in subs:
        assert f"`{s.field}`" in report, s.field
    # the evaluation ran the paper protocol on the shipped benchmark files, k = EVAL_SAMPLES
    for bench in ("aime24", "aime25", "amc23", "amc", "mmlu_pro_sample300"):
        assert list(pr.glob(f"dapo/seed0/eval/step_*/{bench}__paper__k{rehearsal.EVAL_SAMPLES}.json")), bench
    again = _run(args, timeout=600)      # a rerun of a finished rehearsal submits nothing
    assert "nothing to do" in again


"""Reports that travel: the generated REPRODUCTION.md prints no absolute path of the machine that wrote it,
links each run's live logs (TensorBoard, W&B) relative to itself, and the model column names the preset's
model."""
import json
from pathlib import Path

from figures.report import REPO_ROOT, write_report
from figures.synthetic import make_synthetic


def test_report_paths_are_relative_and_live_logs_are_linked(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from reproduce.jobs.collect import live_logs
    from reproduce.matrix.presets import load_preset
    results = make_synthetic(tmp_path / "runs" / "tiny", arms=["dapo", "dapo_cont", "armor"])
    runs = results.parent
    w = SummaryWriter(str(runs / "dapo" / "seed0" / "tensorboard"))
    w.add_scalar("train/accuracy", 0.5, 1)
    w.close()
    (runs / "armor" / "seed0").mkdir(parents=True)
    (runs / "armor" / "seed0" / "wandb.json").write_text(json.dumps(
        {"id": "ab12cd34", "project": "armor-repro", "entity": None, "mode": "offline"}))
    # the driver's collect lists the runs' live logs in results.meta.json; the report reads them there
    meta = json.loads((runs / "results.meta.json").read_text())
    meta["live_logs"] = live_logs(load_preset("tiny"), tmp_path / "runs", [0])
    assert [x["run"] for x in meta["live_logs"]] == ["dapo/seed0", "armor/seed0"]
    (runs / "results.meta.json").write_text(json.dumps(meta))
    report = write_report(results, runs / "REPRODUCTION.md", preset="tiny",
                          command="python reproduce/run_all.py", runs_dir=runs)
    text = report.read_text()
    assert str(tmp_path) not in text and str(REPO_ROOT) not in text
    assert "| results | `results.parquet` |" in text
    live = text[text.index("## Live logs"):text.index("## Checklist")]
    assert "| `dapo/seed0` | [dapo/seed0/tensorboard](dapo/seed0/tensorboard) | — |" in live
    assert (report.parent / "dapo/seed0/tensorboard").is_dir()                  # the link resolves
    assert "`armor-repro` run `ab12cd34` (offline)" in live and "dapo_cont" not in live   # no logs, no row
    # written elsewhere (outside the run root and the repository): names only, still no absolute path
    other = write_report(results, tmp_path / "elsewhere" / "R.md", preset="tiny", runs_dir=runs)
    assert str(tmp_path) not in other.read_text() and "| results | `results.parquet` |" in other.read_text()


def collect_one_row(root: Path) -> Path:
    """The driver's collect of the tiny preset over one fake run (dapo seed 0, one validation row)."""
    from reproduce.jobs.collect import collect
    from reproduce.matrix.presets import load_preset
    run = root / "tiny" / "dapo" / "seed0"
    run.mkdir(parents=True)
    (run / "validation.jsonl").write_text(json.dumps(
        {"step": 10, "total_step": 10, "benchmark": "toy_val", "metric": "avg@4", "k": 4, "value": 0.5})
        + "\n")
    return collect(load_preset("tiny"), root, [0])


def test_model_column_is_the_presets_display_name(tmp_path):
    from figures.data import load_context
    from figures.tables import build_table
    from armor.config import load_config
    from reproduce.matrix.presets import Preset, load_preset
    p = load_preset("tiny")
    assert p.model_name == "toy Qwen2 (167K)" != Path(p.cfg.model.path).parent.name
    results = collect_one_row(tmp_path)
    ctx = load_context(results, preset="tiny")
    assert ctx.model == "toy Qwen2 (167K)"
    assert "| toy Qwen2 (167K) |" in build_table(ctx, "table1").to_markdown()
    assert json.loads((tmp_path / "tiny" / "results.meta.json").read_text())["model"] == "toy Qwen2 (167K)"
    bare = Preset("x", p.path, load_config(p.path, ["model.display_name="]))
    assert bare.model_name == "world"                                           # "" falls back to the path

"""Fetching (reproduce/hub.py): the hub models and datasets a paper preset names are copied once into a
shared folder by the driver's first job, and the train and evaluate jobs read the copies. Offline: a local
folder laid out like the hub (ARMOR_HUB_MIRROR) stands in for it; the real hub is never asked
(HF_HUB_OFFLINE=1)."""
import io
import json
import struct
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest

from armor.config import load_config
from reproduce.matrix.arms import arm_definitions
from reproduce.matrix.overrides import train_overrides
from reproduce.jobs.evaluate import eval_command
from reproduce.dag.graph import build_jobs
from reproduce.matrix.presets import load_preset
from reproduce import hub, run_all
from reproduce.jobs import cli
from slurm.launcher import topo_order

GPQA_README = """---
configs:
- config_name: gpqa_diamond
  data_files:
  - split: train
    path: gpqa_diamond.csv
- config_name: gpqa_main
  data_files:
  - split: train
    path: gpqa_main.csv
---
stand-in for the gated Idavidrein/gpqa
"""
GPQA_COLS = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"


def make_mirror(root: Path) -> Path:
    """A hub stand-in: the 7B model (a config and a weights file) and the two hub datasets of the 7B preset,
    in their hub repositories' layouts (GPQA: csv per config named in the README; MMLU-Pro: parquet)."""
    m = root / "Qwen" / "Qwen2.5-Math-7B"
    m.mkdir(parents=True)
    (m / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    # a readable safetensors file of 5000 bytes (the harness and the trainer check the header before loading):
    # 8 bytes of header length, the header padded with spaces to 128, one uint8 tensor of the rest
    header = json.dumps({"w": {"dtype": "U8", "shape": [4864], "data_offsets": [0, 4864]}}).ljust(128)
    (m / "model.safetensors").write_bytes(struct.pack("<Q", 128) + header.encode() + b"\0" * 4864)
    g = root / "datasets" / "Idavidrein" / "gpqa"
    g.mkdir(parents=True)
    (g / "README.md").write_text(GPQA_README)
    (g / "gpqa_diamond.csv").write_text(GPQA_COLS + "What is 2+2?,four,three,five,six\n"
                                        "The sky is?,blue,red,green,black\n")
    (g / "gpqa_main.csv").write_text(GPQA_COLS + "not diamond,a,b,c,d\n")
    d = root / "datasets" / "TIGER-Lab" / "MMLU-Pro" / "data"
    d.mkdir(parents=True)
    pd.DataFrame([{"question_id": i, "question": f"q{i}?", "options": ["w", "x", "y", "z"], "answer": "C",
                   "answer_index": 2, "category": "math", "src": "t"} for i in range(3)]
                 ).to_parquet(d / "test-00000-of-00001.parquet")
    return root


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No token anywhere (HF_HOME in tmp), the hub offline."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv(hub.MIRROR_ENV, raising=False)
    monkeypatch.delenv(hub.FETCH_ENV, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def _main(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run_all.main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_7b_plan_fetches_its_hub_ids_and_the_toy_presets_nothing(offline):
    sd = offline / "fetch"
    items = hub.items(load_preset("qwen25-math-7b"), sd)
    assert [(i.kind, i.repo_id, i.benchmark, i.gated) for i in items] == [
        ("model", "Qwen/Qwen2.5-Math-7B", None, False), ("dataset", "Idavidrein/gpqa", "gpqa_diamond", True),
        ("dataset", "TIGER-Lab/MMLU-Pro", "mmlu_pro", False)]     # aime24/25, amc: full copies are shipped
    assert items[0].dest == sd / "models" / "Qwen" / "Qwen2.5-Math-7B" and items[0].keys == ["model.path"]
    for name in ("tiny", "smoke"):
        p = load_preset(name)
        assert hub.items(p, sd) == []
        jobs = build_jobs(p, offline / "runs", fetch_dir=sd)
        assert "fetch" not in {j.key for j in jobs} and topo_order(jobs)[0].key == "world"


def test_7b_dry_run_lists_the_fetch_job_before_the_first_train_job(offline, monkeypatch):
    mirror = make_mirror(offline / "mirror")
    monkeypatch.setenv(hub.MIRROR_ENV, str(mirror))
    sd = offline / "shared_fetch"
    rc, out, err = _main(["--preset", "qwen25-math-7b", "--dry-run", "--cluster", "local", "--root",
                          str(offline / "runs"), "--fetch-dir", str(sd)])
    assert rc == 0, err
    lines = out.splitlines()
    fetched = [l for l in lines if l.startswith("    model ") or l.startswith("    dataset ")]
    assert len(fetched) == 3, out
    assert "Qwen/Qwen2.5-Math-7B" in fetched[0] and "models/Qwen/Qwen2.5-Math-7B" in fetched[0]
    assert hub.human(5000 + len(json.dumps({"model_type": "qwen2"}))) in fetched[0]   # size where known
    assert "gpqa_diamond" in fetched[1] and "mmlu_pro" in fetched[2]
    rows = [l.split()[0] for l in lines if l and not l.startswith(" ") and l.split()[0].count("/") == 2
            or l.startswith("fetch ")]
    assert rows[0] == "fetch" and rows[1].startswith("stage1/"), rows[:3]      # fetching first, then training
    first_train = next(l for l in lines if l.startswith("stage1/dapo/seed0"))
    # it waits for the fetch job
    assert first_train.split()[-1] == "fetch"
    cmd = lines[lines.index(first_train) + 1]
    assert f"model.path={sd / 'models' / 'Qwen' / 'Qwen2.5-Math-7B'}" in cmd     # and reads the fetched model
    ev = lines[lines.index(next(l for l in lines if l.startswith("eval/armor/seed0"))) + 1]
    assert f"gpqa_diamond={sd / 'datasets' / 'gpqa_diamond.jsonl'}" in ev and "mmlu_pro=" in ev
    assert not sd.exists() and not (offline / "runs").exists()                  # a dry run writes nothing


def test_dry_run_without_mirror_says_what_is_unknown_and_what_a_gated_set_needs(offline):
    rc, out, err = _main(["--preset", "qwen25-math-7b", "--dry-run", "--cluster", "local", "--root",
                          str(offline / "runs")])
    assert rc == 0, err
    gpqa = next(l for l in out.splitlines() if "Idavidrein/gpqa" in l)
    assert "size unknown" in gpqa and "gated: needs HF_TOKEN (not set)" in gpqa
    assert str(offline / "runs" / "_fetch") in out                              # the default fetch folder


def test_a_gated_dataset_without_a_token_fails_before_any_job_naming_HF_TOKEN(offline, monkeypatch):
    root = offline / "runs"
    rc, out, err = _main(["--preset", "qwen25-math-7b", "--cluster", "local", "--root", str(root),
                          "--no-wait"])
    assert rc == 2 and "HF_TOKEN" in err and "gpqa_diamond (Idavidrein/gpqa)" in err, err
    assert not (root / "qwen25-math-7b" / "_jobs").exists()                     # nothing was submitted
    items = hub.items(load_preset("qwen25-math-7b"), offline / "s")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    hub.check_ready(items)                                                     # a token is enough to start


def test_a_mirror_lacking_an_item_is_refused_naming_the_path(offline, monkeypatch):
    mirror = make_mirror(offline / "mirror")
    import shutil
    shutil.rmtree(mirror / "datasets" / "TIGER-Lab")
    monkeypatch.setenv(hub.MIRROR_ENV, str(mirror))
    items = hub.items(load_preset("qwen25-math-7b"), offline / "s")
    with pytest.raises(hub.FetchError, match=r"TIGER-Lab/MMLU-Pro.*datasets/TIGER-Lab/MMLU-Pro"):
        hub.check_ready(items)


def test_fetch_job_copies_from_the_mirror_once_and_the_jobs_read_the_copies(offline, monkeypatch):
    from eval.units import load_benchmarks
    mirror = make_mirror(offline / "mirror")
    monkeypatch.setenv(hub.MIRROR_ENV, str(mirror))
    root, sd = offline / "runs", offline / "fetch"
    preset = load_preset("qwen25-math-7b")
    jobs = {j.key: j for j in build_jobs(preset, root, fetch_dir=sd)}
    assert not jobs["fetch"].is_done()
    assert cli.main(["fetch", "--preset", "qwen25-math-7b", "--root", str(root),
                             "--fetch-dir", str(sd)]) == 0
    assert jobs["fetch"].is_done()
    model = sd / "models" / "Qwen" / "Qwen2.5-Math-7B"
    assert ((model / "model.safetensors").read_bytes()
            == (mirror / "Qwen/Qwen2.5-Math-7B/model.safetensors").read_bytes())
    gpqa = [json.loads(l) for l in (sd / "datasets" / "gpqa_diamond.jsonl").read_text().splitlines()]
    assert [r["Question"] for r in gpqa] == ["What is 2+2?", "The sky is?"]     # the gpqa_diamond config only
    marks = {p.name: p.read_text() for p in sd.rglob("*" + hub.MARK)}
    assert len(marks) == 3
    log = []
    # cached: nothing is copied again
    hub.fetch_all(hub.items(preset, sd), sd, log=log.append)
    assert all(l.startswith("fetched already") for l in log) and len(log) == 3
    assert marks == {p.name: p.read_text() for p in sd.rglob("*" + hub.MARK)}

    # the train job of a stage-1 arm reads the fetched model; stage-2 arms start from checkpoints
    arms = arm_definitions(preset.protocol)
    ov = train_overrides(preset, root, arms["dapo"], 0, None, sd)
    cfg = load_config(preset.path, ov)
    assert cfg.model.path == str(model) and cfg.algo.reference.path == ""
    from common.models import check_model_path
    check_model_path(cfg.model.path, "model.path")
    start = {"step": 140, "checkpoint": str(root / "ck")}
    cfg2 = load_config(preset.path, train_overrides(preset, root, arms["armor"], 0, start, sd))
    assert cfg2.model.path == str(root / "ck")
    # the evaluate job reads the fetched benchmarks, in their own formats, under their own names
    argv = eval_command(preset, root / "ck", root / "out", sd)
    specs = argv[argv.index("--benchmarks") + 1].split(",")
    fetched = [s for s in specs if "=" in s]
    assert [s.split("=")[0] for s in fetched] == ["gpqa_diamond", "mmlu_pro"]
    loaded = dict(load_benchmarks(",".join(fetched)))
    assert sorted(loaded) == ["gpqa_diamond", "mmlu_pro"]
    assert len(loaded["gpqa_diamond"]) == 2 and len(loaded["mmlu_pro"]) == 3
    assert {p.gold for p in loaded["mmlu_pro"]} == {"C"} and loaded["gpqa_diamond"][0].answer_type == "mc"

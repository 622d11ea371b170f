"""Logging backends (armor/logging_backends.py): TensorBoard event files and W&B offline runs carry exactly
the rows of metrics.jsonl / validation.jsonl, also across a kill and resume (ARMOR_FAULT, no timed race)."""
import json
import signal
import struct
from pathlib import Path

import numpy as np
import pytest

from armor.config import load_config
from common.jsonl import read_jsonl

from toy_runs import PRESETS, run, train_cmd


def _train(preset: str, world: Path, out: Path, *extra: str, fault: str | None = None):
    return run(train_cmd(world, out, "validation.max_problems=8", *extra, preset=PRESETS / f"{preset}.yaml"),
               fault, timeout=600)


def _tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def _expected(run: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars metrics.jsonl and validation.jsonl say the backends must hold (x = total_step)."""
    from armor.logging_backends import scalars
    exp: dict[str, list] = {}
    for kind, name in (("train", "metrics.jsonl"), ("val", "validation.jsonl")):
        for r in read_jsonl(run / name):
            for tag, v in scalars(r, kind).items():
                exp.setdefault(tag, []).append((int(r["total_step"]), v))
    return exp


def _assert_tb_equals_jsonl(run: Path) -> None:
    got, exp = _tb_scalars(run / "tensorboard"), _expected(run)
    assert set(got) == set(exp) and "train/accuracy" in got and "val/toy_val" in got, (set(got) ^ set(exp))
    for tag, rows in exp.items():
        # each step once, in order; TensorBoard stores float32
        assert [s for s, _ in got[tag]] == [s for s, _ in rows], tag
        assert [v for _, v in got[tag]] == [float(np.float32(v)) for _, v in rows], tag


def test_tiny_preset_writes_tensorboard_events_equal_to_its_metrics(world, tmp_path):
    """The tiny preset's own logging (tensorboard by default), on the smoke world, for 3 steps."""
    assert load_config(PRESETS / "tiny.yaml").logging.backends == ["jsonl", "tensorboard"]
    out = tmp_path / "tiny"
    r = _train("tiny", world, out, "schedule.total_steps=3", "schedule.validate_every=2",
               "schedule.save_every=2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    _assert_tb_equals_jsonl(out)


@pytest.mark.slow      # a logger's kill and resume: the W&B test below; TensorBoard's events: the tiny one
def test_tensorboard_after_kill_and_resume_has_each_step_once(world, tmp_path):
    """Killed while writing the step-4 checkpoint (steps 3-4 already logged), resumed from step 2: the event
    files hold steps 1..6 once each, with the values of the final metrics.jsonl (the recomputed rows)."""
    out = tmp_path / "run"
    args = ["logging.backends=[jsonl,tensorboard]", "schedule.total_steps=6", "schedule.save_every=2",
            "schedule.validate_every=2"]
    r = _train("smoke", world, out, *args, fault="checkpoint@4")
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    before = _tb_scalars(out / "tensorboard")
    assert [s for s, _ in before["train/accuracy"]] == [1, 2, 3, 4]   # logged before the kill
    r = _train("smoke", world, out, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 1
    _assert_tb_equals_jsonl(out)


def test_a_backend_whose_package_is_missing_is_refused_naming_the_key(monkeypatch):
    import importlib.util

    from armor import logging_backends
    cfg = load_config(PRESETS / "smoke.yaml", ["logging.backends=[jsonl,wandb]"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError,
                       match=r"logging\.backends: \['jsonl', 'wandb'\] names 'wandb'.*pip install wandb"):
        logging_backends.check(cfg.logging)
    logging_backends.check(load_config(PRESETS / "smoke.yaml").logging)   # jsonl needs nothing


# ------------------------------------------------------------------------------------------------ W&B
def _wandb_records(path: Path):
    """The records of one offline .wandb file (the LevelDB-log layout W&B writes: a 7-byte header, 32 KiB
    blocks of records with a 7-byte header: crc32, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2 as pb
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if len(chunk) < n:
            break                                   # a torn tail (killed process)
        buf = chunk if kind == 2 else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            yield rec


def _wandb_history(run: Path) -> list[tuple[str, int, dict]]:
    """(offline run folder, step, {key: value}) of every history record, in file order per folder."""
    out = []
    for f in sorted((run / "wandb").glob("offline-run-*/run-*.wandb")):
        for rec in _wandb_records(f):
            if rec.WhichOneof("record_type") == "history":
                items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                         for i in rec.history.item}
                out.append((f.parent.name, rec.history.step.num,
                            {k: v for k, v in items.items() if not k.startswith("_")}))
    return out


def test_wandb_offline_run_resumes_the_same_run_without_duplicate_steps(world, tmp_path):
    """A W&B offline run (skipped, with the reason, where wandb is not installed), killed while writing the
    step-4 checkpoint and resumed from step 2: one W&B run id for both processes; the offline folder left
    holds every step once (the killed process's folder is superseded: W&B loses what its service had buffered
    at a SIGKILL, so the resumed process sends again the rows the run keeps), with the numbers of
    metrics.jsonl and validation.jsonl."""
    pytest.importorskip("wandb",
                        reason="wandb is not installed (pip install wandb): the W&B backend is not tested")
    out = tmp_path / "run"
    args = ["logging.backends=[jsonl,wandb]", "logging.wandb_mode=offline", "schedule.total_steps=6",
            "schedule.save_every=2", "schedule.validate_every=2"]
    r = _train("smoke", world, out, *args, fault="checkpoint@4")
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    run_id = json.loads((out / "wandb.json").read_text())["id"]
    killed = [p.name for p in (out / "wandb").glob("offline-run-*")]
    assert len(killed) == 1 and killed[0].endswith("-" + run_id), killed
    r = _train("smoke", world, out, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "wandb.json").read_text())["id"] == run_id
    folders = [p.name for p in (out / "wandb").glob("offline-run-*")]
    assert len(folders) == 1 and folders[0].endswith("-" + run_id) and folders != killed, (killed, folders)
    assert (out / "wandb" / "latest-run").resolve().name == folders[0]
    hist = _wandb_history(out)
    steps = [step for _, step, _ in hist]
    assert steps == sorted(set(steps)), steps                                  # each step once, in order
    metrics = {int(m["total_step"]): m for m in read_jsonl(out / "metrics.jsonl")}
    train = {step: items for _, step, items in hist if "train/accuracy" in items}
    assert sorted(train) == sorted(metrics) == [1, 2, 3, 4, 5, 6]
    for step, items in train.items():
        numbers = {k: v for k, v in metrics[step].items() if f"train/{k}" in items}
        assert {"accuracy", "loss", "time_step", "reference_reset"} <= set(numbers), sorted(numbers)
        assert {k: items[f"train/{k}"] for k in numbers} == {k: float(v) for k, v in numbers.items()}, step
    val = sorted((step, items["val/toy_val"]) for _, step, items in hist if "val/toy_val" in items)
    assert val == [(int(v["total_step"]), v["value"]) for v in read_jsonl(out / "validation.jsonl")]
    assert [v[0] for v in val] == [0, 2, 4, 6]

"""Collection: the runs of a preset -> runs/<preset>/results.parquet + results.meta.json, and whether the
table (and the figures drawn from it) are current.

    link_aliases(preset, root, seeds)   # alias arms' folders -> symlinks to their canonical runs
    collect(preset, root, seeds)        # reads validation.jsonl + eval summaries, writes the table; beside it
                                        # steps.parquet (every run's per-step metrics,
                                        common.results.STEP_METRICS) # and noise_floor.json
                                        (reproduce/jobs/noise.py), when measured

The table's columns are docs/CONTRACTS.md's (common/results.py owns them); results.meta.json also carries
the claims register as resolved for the preset (`claims`: reproduce/matrix/claims.py). Its inputs'
fingerprint (names, sizes, mtimes) goes into results.meta.json: `collect_done` is true while no input
changed. `collect` only reads the runs; `link_aliases` is the one step that writes into run folders.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Optional

from armor.config import read_yaml
from common.jsonl import read_json, read_jsonl, write_json_atomic
from common.layout import STEP_RE
from eval.card import card_markdown, protocol_card
from common.results import META_NAME, NOISE_NAME, STEPS_NAME, frame, steps_frame, summary_rows, write_results
from reproduce.jobs import noise
from reproduce.matrix import branching
from reproduce.jobs.peaks import read_peak, start_point, validation_benchmark
from reproduce.matrix import claims, rehearsal
from reproduce.matrix.arms import (Arm, arm_definitions, claims_register, figure_arms, figure_panels,
                                   preset_runs, table_step)
from reproduce.matrix.presets import STATE_JSON, Preset, preset_root, repo_path, run_dir

FIG_STAMP = ".armor_figures.json"
_EVAL_NAME = re.compile(r"^(?P<bench>.+?)__(?P<proto>.+?)__k(?P<k>\d+)\.json$")


def link_aliases(preset: Preset, root: Path, seeds: list[int]) -> list[Path]:
    """Make each alias arm's run folder a relative symlink to its canonical run (where that run exists and the
    folder does not); returns the links made."""
    made = []
    for arm in arm_definitions(preset.protocol).values():
        if not arm.alias_of:
            continue
        for s in seeds:
            run, link = run_dir(root, preset, arm.alias_of, s), run_dir(root, preset, arm.name, s)
            if run.is_dir() and not link.exists() and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(run, link.parent))
                made.append(link)
    return made


def _run_offset(run: Path) -> Optional[int]:
    f = run / "config.yaml"
    if f.is_file():
        try:
            return int((read_yaml(f) or {}).get("step_offset") or 0)
        except Exception:
            return None
    return None


def collect_inputs(preset: Preset, root: Path, seeds: list[int]) -> list[Path]:
    arms = arm_definitions(preset.protocol)
    files = []
    for arm in arms.values():
        if arm.alias_of:
            continue
        for s in seeds:
            run = run_dir(root, preset, arm.name, s)
            for name in ("validation.jsonl", "config.yaml", "peak.json", "metrics.jsonl"):
                if (run / name).is_file():
                    files.append(run / name)
            if (run / "eval").is_dir():
                files += sorted(x for x in (run / "eval").rglob("*.json") if not x.name.startswith("."))
    floor = noise.result_path(preset, root)
    return files + ([floor] if floor.is_file() else [])


def fingerprint(preset: Preset, root: Path, seeds: list[int]) -> str:
    h = hashlib.sha1()
    h.update(json.dumps([preset.name, sorted(arm_definitions(preset.protocol)), sorted(seeds)]).encode())
    for f in collect_inputs(preset, root, seeds):
        st = f.stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def eval_file_rows(path: Path, meta: dict, step_offset: int) -> list[dict]:
    """Table rows of one eval summary JSON (eval.evaluate's layout); its step is the summary's total_step,
    else step_offset + its step (or the nearest step_NNNNNN folder's). A file that is not a summary gives no
    rows."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict) or not data.get("samples"):
        return []
    step = data.get("total_step")
    if step is None:
        local = data.get("step")
        if local is None:
            local = next((int(m.group(1)) for m in map(STEP_RE.match, (q.name for q in path.parents)) if m),
                         None)
        if local is None:
            return []
        step = step_offset + int(local)
    m = _EVAL_NAME.match(path.name)
    summary = {**data, "benchmark": data.get("benchmark") or (m.group("bench") if m else path.stem)}
    return summary_rows(summary, meta, step=int(step))


def continued_start(preset: Preset, arm: Arm) -> Optional[int]:
    """The total step a continued control starts at (reproduce/matrix/branching.py): its run folder holds its
    baseline's rows from step 1, of which it reports those from this step on; None for any other arm."""
    return branching.start_step(preset.protocol, arm) if branching.continued(preset.protocol, arm) else None


def _run_rows(preset: Preset, root: Path, arm: Arm, seed: int, run: Path) -> list[dict]:
    """The validation and eval rows of one arm's run (an alias reads its canonical run; a continued control
    its rows from its start on)."""
    offset = _run_offset(run)
    if offset is None:
        st = start_point(preset, root, arm, seed) if arm.stage == 2 else None
        offset = int(st["step"]) if st else 0
    first = continued_start(preset, arm)
    base = {"preset": preset.name, "model": preset.model_name, "arm": arm.name, "seed": int(seed)}
    rows = []
    for r in read_jsonl(run / "validation.jsonl"):
        k = int(r.get("k") or 0)
        step = int(r.get("total_step", offset + int(r["step"])))
        if first is not None and step < first:
            continue
        rows.append({**base, "step": step,
                     "benchmark": r["benchmark"], "metric": r.get("metric") or f"avg@{k}", "k": k,
                     "value": float(r["value"]), "n": k, "source": "validation"})
    if (run / "eval").is_dir():
        for jf in sorted((run / "eval").rglob("*.json")):
            if not jf.name.startswith("."):
                rows += eval_file_rows(jf, base, offset)
    return rows


def _step_rows(arm: Arm, seed: int, run: Path, offset: int, preset: Optional[Preset] = None) -> list[dict]:
    """The per-step rows of one run's metrics.jsonl ({arm, seed, step (total), local_step, metrics...}). A
    continued control's: its steps after its start, `local_step` counted from it (as a stage-2 run's), and
    without the KL monitor where its πref is not its start (branching.monitor_reset)."""
    first = continued_start(preset, arm) if preset is not None else None
    drop_kl = first is not None and first != branching.monitor_reset(
        preset.protocol, arm_definitions(preset.protocol), arm.continues)
    out = []
    for r in read_jsonl(run / "metrics.jsonl"):
        if "step" not in r:
            continue
        local = int(r["step"])
        step = int(r.get("total_step", offset + local))
        if first is not None:
            if step <= first:
                continue
            local = step - first
            if drop_kl:
                r = {k: v for k, v in r.items() if k not in ("kl_reverse", "kl_forward")}
        out.append({**r, "arm": arm.name, "seed": int(seed), "local_step": local, "step": step})
    return out


def collect(preset: Preset, root: Path, seeds: list[int]) -> Path:
    """Write runs/<preset>/results.parquet (docs/CONTRACTS.md columns) and results.meta.json."""
    fp = fingerprint(preset, root, seeds)
    arms = arm_definitions(preset.protocol)
    rows, step_rows = [], []
    peaks: dict = {}
    # the distinct CPU numerics the runs computed with (armor.run_folder NUMERICS_FILE)
    numerics: set[str] = set()
    for arm in arms.values():
        for s in seeds:
            run = run_dir(root, preset, arm.run_arm, s)
            if not run.is_dir():
                continue
            numerics.add(json.dumps(read_json(run / "numerics.json"), sort_keys=True))
            rows += _run_rows(preset, root, arm, s, run)
            step_rows += _step_rows(arm, s, run, _run_offset(run) or 0, preset)
            if arm.stage == 1:
                pk = read_peak(root, preset, arm.name, s)
                if pk:
                    peaks.setdefault(arm.name, {})[str(s)] = pk["step"]
    df = frame(rows)
    if len(df):
        df = df.drop_duplicates(subset=["arm", "seed", "step", "benchmark", "metric", "source"], keep="last")
        df = df.sort_values(["arm", "seed", "source", "benchmark", "metric", "step"]).reset_index(drop=True)
    out = preset_root(root, preset)
    out.mkdir(parents=True, exist_ok=True)
    protocol = json.loads(json.dumps(dataclasses.asdict(preset.protocol)))
    # every experiment fact the figures need is written here (figures/data.py reads no other driver file)
    meta = {"preset": preset.name, "model": preset.model_name, "protocol": protocol, "peaks": peaks,
            "aliases": {a.name: a.alias_of for a in arms.values() if a.alias_of}, "seeds": seeds,
            "validation_benchmark": validation_benchmark(preset), "inputs": fp, "rows": len(df),
            "cpu_numerics": [json.loads(n) for n in sorted(numerics) if n != "null"], "time": time.time(),
            "figure_arms": figure_arms(preset.protocol), "figure_panels": figure_panels(preset.protocol),
            "arms": arm_facts(preset, root, seeds),
            "world": world_facts(preset), "live_logs": live_logs(preset, root, seeds),
            "claims": claims_meta(preset)}
    card = protocol_card_text(preset)
    if card is not None:
        meta["protocol_card"] = card
    subs = rehearsal.of_preset(preset, root)
    if subs:        # a CPU rehearsal: figures/ label every output and the report lists the substitutions
        meta["rehearsal"] = {"of": preset.protocol.rehearsal_of, "label": rehearsal.LABEL,
                             "substitutions": [s.to_dict() for s in subs]}
    write_results(out / "results.parquet", df)
    write_steps(out / STEPS_NAME, step_rows)
    floor = noise.read_noise(noise.result_path(preset, root))
    if floor is not None:
        write_json_atomic(out / NOISE_NAME, floor, **STATE_JSON)
    elif (out / NOISE_NAME).exists():
        (out / NOISE_NAME).unlink()
    write_json_atomic(out / META_NAME, meta, **STATE_JSON)
    return out / "results.parquet"


def protocol_card_text(preset: Preset) -> str | None:
    """The protocol card (eval/card.py, Markdown) of the preset's final evaluation; None for the tiny world's
    own protocol (``toy``: its template and grader are the world's, docs/toy_world.md)."""
    p = preset.protocol
    if not p.eval_benchmarks or p.eval_protocol == "toy":
        return None
    card = protocol_card(p.eval_protocol, list(p.eval_benchmarks), preset.cfg.lengths.max_response)
    return card_markdown(card)


def arm_facts(preset: Preset, root: Path, seeds: list[int]) -> dict[str, dict]:
    """Each arm of the protocol as the figures read it (results.meta.json `arms`): Arm.facts(), the figures
    that draw it, the paper's table step, each seed's start (total step; stage 1: 0) and whether its OPD/MOPD
    teacher is its own start (so its weights stay θ*'s)."""
    p = preset.protocol
    figs = figure_arms(p)
    out = {}
    for arm in arm_definitions(p).values():
        f = arm.facts()
        f["figures"] = [name for name, members in figs.items() if arm.name in members]
        f["table_step"] = table_step(p, arm.name)
        starts = {}
        for s in seeds:
            if arm.stage == 1:
                starts[str(s)] = 0
            elif (st := start_point(preset, root, arm, s)) is not None:
                starts[str(s)] = int(st["step"])
        f["starts"] = starts
        f["teacher_is_start"] = any(_teacher_is_start(run_dir(root, preset, arm.run_arm, s)) for s in seeds)
        out[arm.name] = f
    return out


def claims_meta(preset: Preset) -> dict:
    """The claims register resolved for this preset (results.meta.json `claims`; figures/claims.py reads it):
    the seeds' role (protocol.claims), the roles, each entry's arms and whether this preset runs them."""
    runs, _ = preset_runs(preset)
    return claims.register_meta(claims_register(preset), preset, runs)


def _teacher_is_start(run: Path) -> bool:
    """The run's config names a distillation teacher that is its own start checkpoint (its weights then stay
    θ*'s under OPD)."""
    f = run / "config.yaml"
    cfg = (read_yaml(f) or {}) if f.is_file() else {}
    teacher = ((cfg.get("algo") or {}).get("distill") or {}).get("teacher_path")
    return bool(teacher) and teacher == (cfg.get("model") or {}).get("path")


def world_facts(preset: Preset) -> dict:
    """The toy world a preset trains in (its base model's folder): where, and the validation split's
    blind-spot chain ceiling (world.json), for the world checks; {} without a toy world."""
    w = preset.world()
    if w is None:
        return {}
    world = read_json(repo_path(w[0]) / "world.json")
    try:
        ceiling = float(world["splits"]["validation"]["chain_ceiling"])
    except (TypeError, KeyError, ValueError):
        ceiling = None
    return {"dir": str(w[0]), "validation_chain_ceiling": ceiling}


def live_logs(preset: Preset, root: Path, seeds: list[int]) -> list[dict]:
    """Each canonical run's TensorBoard folder and W&B run (armor/logging_backends.py), relative to the
    preset's runs folder, for the report's "Live logs"."""
    out = []
    for arm in arm_definitions(preset.protocol).values():
        if arm.alias_of:
            continue
        for s in seeds:
            run = run_dir(root, preset, arm.name, s)
            tb = run / "tensorboard"
            has_tb = tb.is_dir() and any(tb.glob("events.out.tfevents.*"))
            wandb = read_json(run / "wandb.json")
            if has_tb or isinstance(wandb, dict):
                out.append({"run": f"{arm.name}/seed{s}", "tensorboard": f"{arm.name}/seed{s}/tensorboard"
                            if has_tb else None, "wandb": wandb if isinstance(wandb, dict) else None})
    return out


def write_steps(path: Path, rows: list[dict]) -> Path:
    """steps.parquet: the per-step table (common.results.steps_frame), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(steps_frame(rows), preserve_index=False)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def collect_done(preset: Preset, root: Path, seeds: list[int]) -> bool:
    out = preset_root(root, preset)
    meta = read_json(out / META_NAME)
    return (bool(meta) and (out / "results.parquet").is_file()
            and meta.get("inputs") == fingerprint(preset, root, seeds))


def _sha(path: Path) -> Optional[str]:
    try:
        return hashlib.sha1(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def write_figures_stamp(preset: Preset, root: Path, only: Optional[list[str]]) -> None:
    """Record which results table (its sha1) and item subset the figures in runs/<preset>/figures were drawn
    from."""
    out = preset_root(root, preset)
    write_json_atomic(out / "figures" / FIG_STAMP,
                      {"results": _sha(out / "results.parquet"), "only": only or None,
                                                    "time": time.time()}, **STATE_JSON)


def figures_done(preset: Preset, root: Path, only: Optional[list[str]]) -> bool:
    out = preset_root(root, preset)
    st = read_json(out / "figures" / FIG_STAMP)
    return (bool(st) and st.get("results") == _sha(out / "results.parquet")
            and st.get("only") == (only or None))


def cmd_collect(preset: Preset, root: Path, seeds: list[int]) -> int:
    """Link the alias arms' folders to their canonical runs, then write the results table."""
    link_aliases(preset, root, seeds)
    print(f"wrote {collect(preset, root, seeds)}")
    return 0

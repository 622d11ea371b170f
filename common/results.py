"""The tidy results table (`results.parquet`), owned here: its columns, its key, the eval-summary → rows rule,
and its two writers (the driver's whole-table write, the harness's locked append).

    row = {"preset", "model", "arm", "seed", "step", "benchmark", "metric", "k", "value", "n", "source"}
    metric_k("pass@16") -> ("pass", 16);  metric_scorer("avg@32/math_verify") -> "math_verify"
    summary_rows(summary, meta) -> [row, ...]
    write_results(path, rows, metadata={"protocol": ...});  append_results(path, rows)

Columns and meanings are docs/CONTRACTS.md's. `step` is the run's total step (step_offset + local step);
`source` is "validation" (in-loop, from validation.jsonl) or "eval" (the harness's summaries).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Optional

RESULT_COLUMNS = ["preset", "model", "arm", "seed", "step", "benchmark", "metric", "k", "value", "n",
                  "source"]
# a row is replaced by a newer one with this key
RESULT_KEY = [c for c in RESULT_COLUMNS if c != "value"]
INT_COLUMNS = ("seed", "step", "k", "n")
STR_COLUMNS = ("preset", "model", "arm", "benchmark", "metric", "source")
# the metrics a table row may hold: avg@k, pass@j (unbiased), best@j (verl's bootstrap), maj@k; a name ending
# in /<scorer> is the same metric by a scorer other than the evaluation's primary one (avg@32/math_verify)
METRIC_RE = re.compile(r"^(avg|pass|maj|best)@(\d+)(?:/([a-z_]+))?$")


class ResultsError(ValueError):
    """A results table that does not have the contract's columns."""


def metric_k(metric: str) -> tuple[str, Optional[int]]:
    """("avg", 32) for "avg@32"; (the name, None) for a name that is not a table metric."""
    m = METRIC_RE.match(str(metric))
    return (m.group(1), int(m.group(2))) if m else (str(metric), None)


def metric_scorer(metric: str) -> Optional[str]:
    """The scorer a metric name names ("math_verify" for "avg@32/math_verify"); None: the primary one."""
    m = METRIC_RE.match(str(metric))
    return m.group(3) if m else None


def summary_rows(summary: dict, meta: dict, *, step: Optional[int] = None) -> list[dict]:
    """Rows of one eval summary (eval.evaluate's `<bench>__<protocol>__k<k>.json`): one per table metric.

    `meta` gives preset/model/arm/seed; the step is `step` if given, else the summary's total_step, else its
    step. n is the summary's sample count (k)."""
    n = int(summary["samples"])
    if step is None:
        step = summary.get("total_step")
        step = summary["step"] if step is None else step
    rows = []
    for metric, value in summary["metrics"].items():
        kind, k = metric_k(metric)
        if k is None:
            continue
        rows.append({"preset": str(meta["preset"]), "model": str(meta["model"]), "arm": str(meta["arm"]),
                     "seed": int(meta["seed"]), "step": int(step), "benchmark": summary["benchmark"],
                     "metric": metric, "k": k, "value": float(value), "n": n, "source": "eval"})
    return rows


def frame(rows: Iterable[dict]):
    """A DataFrame of rows with the contract's columns, in order, with their dtypes."""
    import pandas as pd
    return typed(pd.DataFrame(list(rows), columns=RESULT_COLUMNS))


def typed(df):
    """`df` with the contract's dtypes (ints int64, value float, names str);
    ResultsError if a column is missing."""
    missing = [c for c in RESULT_COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(f"results table lacks columns {missing} (docs/CONTRACTS.md)")
    df = df.copy()
    for c in INT_COLUMNS:
        df[c] = df[c].astype("int64")
    df["value"] = df["value"].astype(float)
    for c in STR_COLUMNS:
        df[c] = df[c].astype(str)
    return df


def write_results(path: str | os.PathLike, df, metadata: Optional[dict] = None) -> Path:
    """Write a whole table atomically (temporary file + rename); `metadata` goes into the parquet schema's
    key/value metadata as JSON (e.g. {"protocol": {...}}), readable by any parquet reader."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(typed(df), preserve_index=False)
    if metadata:
        md = dict(table.schema.metadata or {})
        md.update({k.encode(): json.dumps(v).encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(md)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def append_results(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Append rows to a table (created if absent), a newer row replacing an older one with the same key;
    under a file lock (several evaluations may append at once) and atomic."""
    import fcntl

    import pandas as pd
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        new = frame(rows)
        if path.exists():
            try:
                old = typed(pd.read_parquet(path))
            except ResultsError as e:
                raise ResultsError(f"{path}: {e}") from None
            df = pd.concat([old, new], ignore_index=True) if len(old) else new
        else:
            df = new
        df = df.drop_duplicates(subset=RESULT_KEY, keep="last").reset_index(drop=True)
        write_results(path, df)
    return path


# ------------------------------------------------------------------------------ beside the table
# steps.parquet: the per-step evidence of every run (metrics.jsonl, these keys only, float32), written by the
# driver's collect beside results.parquet; `step` is the total step, `local_step` the run's own.
# the driver's record of the experiment beside the table (reproduce/jobs/collect.py writes it, figures/data.py
# reads it): preset, protocol, arms (stage, baseline, start, figures, sweep, table_step, starts), peaks, world
META_NAME = "results.meta.json"
STEPS_NAME = "steps.parquet"
STEP_ID_COLUMNS = ["arm", "seed", "step", "local_step"]
STEP_METRICS = ["anchors", "prompts_kept", "prompts_drawn", "shortfall", "ref_samples", "clipfrac",
                "clipfrac_low", "clipfrac_high", "uncertain_frac", "clipfrac_and_uncertain", "kl_reverse",
                "kl_forward", "accuracy", "reward_mean", "response_length", "grad_norm", "entropy",
                "reference_reset", "rollout_is_mean", "rollout_is_max", "rollout_is_min",
                "rollout_is_weight_mean", "rollout_is_truncated_frac", "rollout_is_masked_frac"]
STEP_PREFIXES = ("mode_", "anchor_mode_")          # logging.answer_modes' shares, where a run logged them
# noise_floor.json: one checkpoint validated k times with different sampling seeds (the verdicts' floor)
NOISE_NAME = "noise_floor.json"


def step_columns(keys: Iterable[str]) -> list[str]:
    """The metrics.jsonl keys the per-step table keeps, in its column order: STEP_METRICS, then the mode
    shares."""
    keys = list(keys)
    return [k for k in STEP_METRICS if k in keys] + [k for p in STEP_PREFIXES for k in keys
                                                     if k.startswith(p)]


def steps_frame(rows: Iterable[dict]):
    """The per-step table of rows ({arm, seed, step, local_step, metric keys...}): ids int64 / str, every kept
    metric float32 (a missing or null value is NaN), sorted by arm, seed, step."""
    import pandas as pd
    df = pd.DataFrame(list(rows))
    if df.empty:
        return pd.DataFrame(columns=STEP_ID_COLUMNS)
    cols = step_columns(df.columns)
    out = df[STEP_ID_COLUMNS].copy()
    out["arm"] = out["arm"].astype(str)
    for c in ("seed", "step", "local_step"):
        out[c] = out[c].astype("int64")
    for c in cols:
        out[c] = pd.to_numeric(df[c], errors="coerce").astype("float32")
    return out.sort_values(["arm", "seed", "step"], kind="stable").reset_index(drop=True)

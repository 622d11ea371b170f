"""Tables 1-3 of the ARMOR paper from our results, as Markdown and LaTeX.

- Table 1: avg@k per benchmark (AIME24, AIME25, AMC avg@32; math avg = mean of the three; GPQA, MMLU-Pro
  avg@8), baseline vs +ARMOR rows (DAPO, and QAE when the preset has it).
- Table 2: pass@16 on AIME24, AIME25, AMC and their average.
- Table 3: OPD / MOPD / ARMOR (teacher-guided continuations from the DAPO peak), Table 1's columns.

Which checkpoint represents an arm: `Context.select_steps` (figures/data.py), one per seed: the paper's step
on the paper presets when it was evaluated, else the seed's eval step with its best validation score (each
seed was evaluated at its own best checkpoint). The cell is the mean over seeds of each seed's eval value
(source == "eval") at its step, in percent, 2 decimals, "± s" with the standard deviation over seeds (n − 1)
when several seeds were evaluated; the steps column lists each seed's step when they differ ("+10/+60/+60",
seed order). When several eval metrics exist
for a benchmark, the paper's k is used (avg@32 / avg@8 / pass@16) if present, else the largest k. The
"+ARMOR" row of QAE is the best-by-validation of the `qae_armor_*` arms. The steps column is the total step
for stage-1 rows ("140") and "+N" steps after the arm's start for continual rows ("+200"). Deltas are
differences of the printed values ("+5.91", "−1.20"), as in the paper.

Evaluations graded by several scorers (the paper protocol: math_dapo, the authors', primary; math_verify
beside, metrics ``avg@32/math_verify`` ...) get one "ours (<scorer>)" row per other scorer under each of ours,
from the same samples; Table 2 also gets an "ours (best@k)" row, verl's bootstrap estimator beside the
unbiased pass@k. The AMC column shows AMC 2023 (``amc23``) when AI-MO's ``amc`` was evaluated too
(``PREFERRED``).

Presets whose eval benchmarks are none of the paper's (tiny/smoke) get one column per eval benchmark found
plus their mean ("avg"). Paper presets get a `paper` row under each of ours (source column). A cell that
cannot be filled is "—" with a numbered footnote saying why; nothing raises for missing inputs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from common.results import metric_k, metric_scorer

from . import paper as paper_mod
from .data import Context

DASH = "—"
MINUS = "−"
PM = "±"

BENCH_ALIASES = {
    "aime24": {"aime24", "aime2024", "aime_2024", "aime-2024"},
    "aime25": {"aime25", "aime2025", "aime_2025", "aime-2025"},
    "amc": {"amc", "amc23", "amc2023", "amc22", "amc_2023"},
    "gpqa": {"gpqa", "gpqa_diamond", "gpqadiamond", "gpqa-diamond"},
    "mmlu_pro": {"mmlu_pro", "mmlupro", "mmlu-pro"},
}
HEADERS = {"aime24": "AIME24", "aime25": "AIME25", "amc": "AMC", "math_avg": "math avg", "gpqa": "GPQA",
           "mmlu_pro": "MMLU-Pro", "avg": "avg"}
PAPER_K = {"avg": {"aime24": 32, "aime25": 32, "amc": 32, "gpqa": 8, "mmlu_pro": 8},
           "pass": {"aime24": 16, "aime25": 16, "amc": 16}, "best": {"aime24": 16, "aime25": 16, "amc": 16}}
TABLE_COLUMNS = {
    "table1": ("avg", ["aime24", "aime25", "amc", "math_avg", "gpqa", "mmlu_pro"]),
    "table2": ("pass", ["aime24", "aime25", "amc", "avg"]),
    "table3": ("avg", ["aime24", "aime25", "amc", "math_avg", "gpqa", "mmlu_pro"]),
}
DERIVED = {"math_avg": ["aime24", "aime25", "amc"], "avg": ["aime24", "aime25", "amc"]}
TITLES = {
    "table1": "Table 1 — avg@k at the selected checkpoint (baseline vs +ARMOR)",
    "table2": "Table 2 — pass@k at the selected checkpoint (baseline vs +ARMOR)",
    "table3": "Table 3 — teacher-guided continuations from the DAPO peak: OPD / MOPD / ARMOR",
}


@dataclass
class RowSpec:
    key: str                  # row key in paper_numbers.yaml
    method: str
    arms: list[str]           # candidates; the best by validation that has eval rows represents the row
    base: Optional[str] = None  # row key the deltas are taken against


def row_specs(ctx: Context, table: str) -> list[RowSpec]:
    # +ARMOR: the arm the claims register's ARMOR stands for (the preset's protocol.headline_arm)
    head = ctx.role_arm("ARMOR") or "armor"
    if table == "table3":
        return [RowSpec("opd", "OPD", ["opd"]), RowSpec("mopd", "MOPD", ["mopd"]),
                RowSpec("armor", "ARMOR", [head])]
    rows = [RowSpec("dapo", "DAPO", ["dapo"]), RowSpec("dapo_armor", "+ARMOR", [head], base="dapo")]
    if head != "armor":                     # the in-run reset beside the authors' restart
        rows.append(RowSpec("dapo_armor_in_run", "+ARMOR (in-run reset)", ["armor"], base="dapo"))
    has_qae = any(ctx.arm_facts(a).get("baseline") == "qae" for a in ctx.all_arms()) or \
        "qae" in paper_mod.table_rows(ctx.preset, table)
    if has_qae:
        rows += [RowSpec("qae", "QAE", ["qae"]),
                 RowSpec("qae_armor", "+ARMOR", ctx.expected_arms("qae_armor") or ["qae_armor_reset_160"],
                         base="qae")]
    return rows


@dataclass
class Cell:
    value: Optional[float] = None   # percent
    delta: Optional[float] = None
    note: Optional[int] = None      # footnote number
    spread: Optional[float] = None  # standard deviation over seeds (n − 1), percent; None with one seed

    def text(self, minus: str = MINUS) -> str:
        if self.value is None:
            return DASH + (f" [{self.note}]" if self.note else "")
        s = f"{self.value:.2f}" + (f" {PM} {self.spread:.2f}" if self.spread is not None else "")
        if self.delta is not None:
            d = f"{abs(self.delta):.2f}"
            s += f" ({'+' if self.delta >= 0 else minus}{d})"
        return s


@dataclass
class Row:
    model: str
    method: str
    source: str               # "ours" | "paper"
    steps: str
    cells: dict
    arm: Optional[str] = None
    steps_by_seed: dict = field(default_factory=dict)   # {seed: step} of the checkpoints the cells average
    how: str = ""
    seeds: list = field(default_factory=list)


@dataclass
class Table:
    name: str
    title: str
    columns: list[str]        # column keys; headers in HEADERS (or the benchmark name)
    rows: list[Row]
    footnotes: list[str]
    caption: str = ""
    notes: list[str] = field(default_factory=list)   # checkpoint selection lines

    def header(self, col: str) -> str:
        return HEADERS.get(col, col)

    def to_markdown(self, title: bool = True) -> str:
        cols = ["model", "method", "source", "steps"] + [self.header(c) for c in self.columns]
        lines = [f"**{self.title}**", ""] if title else []
        if self.caption:
            lines += [self.caption, ""]
        lines += ["| " + " | ".join(cols) + " |",
                  "|" + "|".join(["---"] * 4 + ["---:"] * len(self.columns)) + "|"]
        prev_model = None
        for r in self.rows:
            model = r.model if r.model != prev_model else ""
            prev_model = r.model
            cells = [r.cells.get(c, Cell()).text() for c in self.columns]
            lines.append("| " + " | ".join([model, r.method, r.source, r.steps or ""] + cells) + " |")
        if self.footnotes:
            lines.append("")
            lines += [f"[{i}] {t}  " for i, t in enumerate(self.footnotes, 1)]
        if self.notes:
            lines.append("")
            lines += [f"- {t}" for t in self.notes]
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        def esc(s: str) -> str:
            s = str(s)
            for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"),
                         ("_", r"\_"), ("θ", r"$\theta$"), ("α", r"$\alpha$"), ("τ", r"$\tau$"),
                         ("β", r"$\beta$"), (PM, r"$\pm$")):
                s = s.replace(a, b)
            return s.replace(DASH, "--").replace(MINUS, "$-$")

        out = [r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{esc(self.title)}}}",
               f"\\label{{tab:{self.name}}}", r"\begin{tabular}{llll" + "r" * len(self.columns) + "}",
               r"\toprule",
               " & ".join(["model", "method", "source",
                           "steps"] + [esc(self.header(c)) for c in self.columns])
               + r" \\", r"\midrule"]
        prev_model = None
        for r in self.rows:
            if prev_model is not None and r.model != prev_model:
                out.append(r"\midrule")
            model = r.model if r.model != prev_model else ""
            prev_model = r.model
            cells = [r.cells.get(c, Cell()).text() for c in self.columns]
            out.append(" & ".join(esc(x) for x in [model, r.method, r.source,
                                                   r.steps or ""] + cells) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}"]
        if self.caption or self.footnotes:
            out.append(r"\par\vspace{2pt}\footnotesize " + esc(self.caption))
            for i, t in enumerate(self.footnotes, 1):
                out.append(f"\\\\[{i}] {esc(t)}")
        out.append(r"\end{table}")
        return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------ helpers
def _norm(b: str) -> str:
    return re.sub(r"[^a-z0-9_\-]", "", str(b).lower())


@lru_cache(maxsize=None)
def _bench_key(b: str) -> Optional[str]:
    nb = _norm(b)
    for key, aliases in BENCH_ALIASES.items():
        if nb in aliases or nb.replace("-", "_") in aliases:
            return key
    return None


def _eval_benchmarks(ctx: Context) -> list[str]:
    d = ctx.df[ctx.df["source"] == "eval"]
    return sorted(d["benchmark"].unique())


def paper_mode(ctx: Context) -> bool:
    return ctx.is_paper or any(_bench_key(b) for b in _eval_benchmarks(ctx))


def columns_for(ctx: Context, table: str) -> tuple[str, list[str]]:
    kind, cols = TABLE_COLUMNS[table]
    if paper_mode(ctx):
        return kind, list(cols)
    benches = _eval_benchmarks(ctx)
    return kind, benches + (["avg"] if len(benches) > 1 else [])


def _pick_metric(rows, kind: str, col: str, scorer: Optional[str] = None) -> Optional[str]:
    """The metric of `kind` for column `col` by `scorer` (None: the primary one): the paper's k if present,
    else the largest k."""
    metrics = [m for m in rows["metric"].unique() if metric_k(m)[0] == kind and metric_scorer(m) == scorer]
    if not metrics:
        return None
    want = PAPER_K.get(kind, {}).get(col)
    name = f"{kind}@{want}" + (f"/{scorer}" if scorer else "")
    if want and name in metrics:
        return name
    return max(metrics, key=lambda m: metric_k(m)[1] or 0)


class _Notes:
    def __init__(self):
        self.items: list[str] = []

    def add(self, text: str) -> int:
        if text not in self.items:
            self.items.append(text)
        return self.items.index(text) + 1


#: when several benchmarks of a column were evaluated, the one the column shows (AMC: AMC 2023, the paper
#: protocol's AMC column; AI-MO's 83-problem `amc` is reported beside it in the results table)
PREFERRED = {"amc": ("amc23", "amc2023", "amc_2023")}


def _bench_rows(ctx: Context, arm: str, steps: dict[int, int], col: str, paper: bool):
    ev = ctx.eval_rows_at(arm, steps)
    if not paper:
        return ev[ev["benchmark"] == col]
    r = ev[ev["benchmark"].map(_bench_key) == col]
    if r["benchmark"].nunique() > 1:
        for name in PREFERRED.get(col, ()):
            if (r["benchmark"] == name).any():
                return r[r["benchmark"] == name]
    return r


def _choose_arm(ctx: Context, spec: RowSpec) -> tuple[Optional[str], dict[int, int], str]:
    """(arm, {seed: step}, how): among the row's candidate arms, the one whose seeds' validation at their
    selected checkpoints is best on average."""
    best = None
    for arm in spec.arms:
        steps, how = ctx.select_steps(arm, ctx.arm_facts(arm).get("table_step"))
        if not steps:
            continue
        vals = [ctx.for_seed(seed).val_curve(arm).at(step) for seed, step in steps.items()]
        score = sum(vals) / len(vals) if all(v is not None for v in vals) else -math.inf
        if best is None or score > best[3]:
            best = (arm, steps, how, score)
    if best is None:
        present = [a for a in spec.arms if a in ctx.arms]
        return (present[0] if present else None), {}, ("no eval rows" if present else "not run")
    return best[0], best[1], best[2]


def _steps_text(steps: dict[int, int], start: int) -> str:
    """The steps column: the total step of a stage-1 row ("140"), "+N" after the start of a continual one;
    each seed's, in seed order, when the seeds' checkpoints differ ("+10/+60/+60")."""
    fmt = (lambda s: str(s)) if start == 0 else (lambda s: f"+{s - start}")   # noqa: E731
    distinct = sorted(set(steps.values()))
    return fmt(distinct[0]) if len(distinct) == 1 else "/".join(fmt(steps[seed]) for seed in sorted(steps))


def _steps_note(steps: dict[int, int]) -> str:
    distinct = sorted(set(steps.values()))
    if len(distinct) == 1:
        return f"step {distinct[0]}"
    return "steps " + ", ".join(f"{steps[seed]} (seed {seed})" for seed in sorted(steps))


def build_table(ctxs: Context | Sequence[Context], table: str) -> Table:
    ctxs = [ctxs] if isinstance(ctxs, Context) else list(ctxs)
    notes = _Notes()
    rows: list[Row] = []
    sel_notes: list[str] = []
    columns: list[str] = []
    metric_used: dict[str, set] = {}
    for ctx in ctxs:
        kind, cols = columns_for(ctx, table)
        for c in cols:
            if c not in columns:
                columns.append(c)
        pm = paper_mode(ctx)
        all_benches = set(ctx.df["benchmark"].unique())
        ours: dict = {}                             # spec key (, scorer) -> our row
        paper_rows = paper_mod.table_rows(ctx.preset, table) if ctx.is_paper else {}
        for spec in row_specs(ctx, table):
            arm, steps_by_seed, how = _choose_arm(ctx, spec)
            cells: dict[str, Cell] = {}
            seeds: list[int] = []
            if not steps_by_seed:
                n = notes.add(f"{ctx.model} {spec.method}: not run: {' / '.join(spec.arms)}"
                              if how == "not run"
                              else f"{ctx.model} {spec.method}: arm {arm} has no eval rows")
                for c in cols:
                    cells[c] = Cell(note=n)
                steps = DASH
            else:
                # "+N": steps after θ* (a restart counts from θ*, as the paper's +ARMOR rows)
                restart = ctx.arm_facts(arm).get("start") == "restart"
                start = (ctx.theta_star() if restart else ctx.arm_start(arm)) or 0
                steps = _steps_text(steps_by_seed, start)
                sel_notes.append(f"{ctx.model} {spec.method}: arm `{arm}` at {_steps_note(steps_by_seed)} "
                                 f"({how})")
                seeds = _fill_cells(ctx, spec, arm, steps_by_seed, cols, kind, pm, all_benches, notes,
                                    metric_used, cells, None)
            row = Row(ctx.model, spec.method, "ours", steps, cells, arm, steps_by_seed, how, seeds)
            if spec.base and spec.base in ours:
                _deltas(row, ours[spec.base])
            ours[spec.key] = row
            rows.append(row)
            # the same samples under the evaluation's other scorers (paper protocol: math_verify beside
            # math_dapo): one row each, "ours (<scorer>)"
            # and, in Table 2, verl's bootstrap best@k beside the unbiased pass@k: "ours (best@k)"
            beside = [(s, kind, f"ours ({s})") for s in _beside_scorers(ctx, arm, steps_by_seed)] \
                if steps_by_seed else []
            if kind == "pass" and steps_by_seed and _has_best(ctx, arm, steps_by_seed):
                beside.append((None, "best", "ours (best@k)"))
            for scorer, skind, label in beside:
                sc: dict[str, Cell] = {}
                _fill_cells(ctx, spec, arm, steps_by_seed, cols, skind, pm, all_benches, notes, metric_used,
                            sc, scorer)
                srow = Row(ctx.model, spec.method, label, steps, sc, arm, steps_by_seed, how, seeds)
                key = (spec.base, label)
                if key in ours:
                    _deltas(srow, ours[key])
                ours[(spec.key, label)] = srow
                rows.append(srow)
            if spec.key in paper_rows:
                p = paper_rows[spec.key]
                prow = Row(ctx.model, spec.method, "paper", str(p.get("steps", "")),
                           {c: Cell(float(p[c])) for c in cols if p.get(c) is not None})
                if spec.base and spec.base in paper_rows:
                    base = paper_rows[spec.base]
                    _deltas(prow, Row("", "", "", "", {c: Cell(float(base[c])) for c in cols
                                                         if base.get(c) is not None}))
                rows.append(prow)
        if ctx.seeds():
            sel_notes.append(f"{ctx.model}: ours = mean over seeds {ctx.seeds()} of each seed's eval values "
                             "at its own checkpoint")
    caption = "Percent. Metrics used: " + "; ".join(
        f"{HEADERS.get(c, c)} {'/'.join(sorted(m))}" for c, m in metric_used.items()) + "." if metric_used \
        else "Percent."
    if any(c in columns for c in DERIVED):
        caption += (" math avg / avg = mean of the benchmark columns (AIME24, AIME25, AMC on paper "
                    "benchmarks).")
    if any(r.base for c in ctxs for r in row_specs(c, table)):
        caption += " Deltas: difference to the baseline row of the printed values."
    if any(cell.spread is not None for r in rows for cell in r.cells.values()):
        caption += f" {PM}: standard deviation over seeds (n − 1) of the per-seed values."
    label = next((c.rehearsal["label"] for c in ctxs if c.rehearsal), None)
    title = f"{label} — {TITLES[table]}" if label else TITLES[table]
    return Table(table, title, columns, rows, notes.items, caption, sel_notes)


def _beside_scorers(ctx: Context, arm: str, steps: dict[int, int]) -> list[str]:
    """The scorers other than the primary one whose metrics the arm's eval rows hold."""
    ev = ctx.eval_rows_at(arm, steps)
    return sorted({s for s in map(metric_scorer, ev["metric"].unique()) if s})


def _has_best(ctx: Context, arm: str, steps: dict[int, int]) -> bool:
    """Whether the arm's eval rows hold verl's bootstrap best@k (the paper protocol reports it)."""
    ev = ctx.eval_rows_at(arm, steps)
    return any(metric_k(m)[0] == "best" and metric_scorer(m) is None for m in ev["metric"].unique())


def _fill_cells(ctx: Context, spec, arm: str, steps_by_seed: dict[int, int], cols, kind: str, pm: bool,
                all_benches, notes: "_Notes", metric_used: dict, cells: dict,
                scorer: Optional[str]) -> list[int]:
    """The cells of one row (benchmark columns, then the derived means) by `scorer` (None: the primary one),
    into `cells`; returns the seeds seen."""
    raw: dict[str, Optional[float]] = {}
    per: dict[str, pd.Series] = {}          # column -> percent value per seed
    seeds: list[int] = []
    by = f" by {scorer}" if scorer else ""
    for c in cols:
        if c in DERIVED and c not in all_benches:
            continue
        r = _bench_rows(ctx, arm, steps_by_seed, c, pm)
        metric = _pick_metric(r, kind, c, scorer)
        if metric is None:
            cells[c] = Cell(note=notes.add(f"{ctx.model} {spec.method}: no {kind}@k eval of {c}{by} "
                                           f"for `{arm}` at {_steps_note(steps_by_seed)}"))
            raw[c] = None
            continue
        r = r[r["metric"] == metric]
        per_seed = r.groupby("seed")["value"].mean()
        seeds = sorted(set(seeds) | set(int(s) for s in per_seed.index))
        raw[c] = float(per_seed.mean()) * 100.0
        per[c] = per_seed * 100.0
        cells[c] = Cell(round(raw[c], 2), spread=_spread(per[c]))
        metric_used.setdefault(c, set()).add(metric)
    for c in cols:  # derived means (math avg, avg)
        if c in cells:
            continue
        parts = DERIVED[c] if pm else [b for b in cols if b not in DERIVED]
        vals = [raw.get(p) for p in parts]
        if vals and all(v is not None for v in vals):
            by_seed = pd.concat([per[p] for p in parts], axis=1).dropna().mean(axis=1)
            cells[c] = Cell(round(sum(vals) / len(vals), 2), spread=_spread(by_seed))
        else:
            cells[c] = Cell(note=notes.add(f"{HEADERS.get(c, c)} needs all of "
                                           f"{', '.join(HEADERS.get(p, p) for p in parts)}"))
    return seeds


def _spread(per_seed: "pd.Series") -> Optional[float]:
    """Standard deviation over seeds (n − 1), rounded as the cell; None with fewer than two seeds."""
    return round(float(per_seed.std(ddof=1)), 2) if len(per_seed) >= 2 else None


def _deltas(row: Row, base: Row) -> None:
    for c, cell in row.cells.items():
        b = base.cells.get(c)
        if cell.value is not None and b is not None and b.value is not None:
            cell.delta = round(round(cell.value, 2) - round(b.value, 2), 2)


def paper_table(table: str, presets: Optional[Sequence[str]] = None) -> Table:
    """The paper's own table (both models) from paper_numbers.yaml, for reports of non-paper presets."""
    rows = []
    kind, cols = TABLE_COLUMNS[table]
    labels = {"dapo": "DAPO", "dapo_armor": "+ARMOR", "qae": "QAE", "qae_armor": "+ARMOR", "opd": "OPD",
              "mopd": "MOPD", "armor": "ARMOR"}
    bases = {"dapo_armor": "dapo", "qae_armor": "qae"}
    for preset in presets or paper_mod.all_paper_presets():
        data = paper_mod.table_rows(preset, table)
        model = (paper_mod.paper_preset(preset).get("model")) or preset
        for key, p in data.items():
            row = Row(model, labels.get(key, key), "paper", str(p.get("steps", "")),
                      {c: Cell(float(p[c])) for c in cols if p.get(c) is not None})
            if key in bases and bases[key] in data:
                b = data[bases[key]]
                _deltas(row, Row("", "", "", "", {c: Cell(float(b[c])) for c in cols
                                                  if b.get(c) is not None}))
            rows.append(row)
    return Table(table, TITLES[table] + " (paper)", cols, rows, [], "Percent, as printed in the paper.")


def table1(ctxs, out_dir=None) -> Table:
    return _emit(build_table(ctxs, "table1"), out_dir)


def table2(ctxs, out_dir=None) -> Table:
    return _emit(build_table(ctxs, "table2"), out_dir)


def table3(ctxs, out_dir=None) -> Table:
    return _emit(build_table(ctxs, "table3"), out_dir)


def _emit(t: Table, out_dir) -> Table:
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{t.name}.md").write_text(t.to_markdown())
        (out / f"{t.name}.tex").write_text(t.to_latex())
    return t


TABLES = {"table1": table1, "table2": table2, "table3": table3}

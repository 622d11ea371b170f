"""Inputs of the figures and tables: the tidy results table, the runs' metrics.jsonl and configs.

    ctx = load_context("runs/tiny/results.parquet")           # one preset (the only one, or preset=...)
    ctx.val_curve("armor")          # step, mean, min, max, n   (validation benchmark, seed mean / band)
    ctx.metric_curve("dapo", "reward_mean")                     # same, from metrics.jsonl
    ctx.select_step("armor")        # checkpoint that represents the arm in the tables (see below)
    ctx.noise_floor                 # noise_floor.json beside the table (reproduce/jobs/noise.py), or None
    ctx.steps                       # steps.parquet beside the table: every run's per-step metrics (or empty)

Every experiment fact (protocol, arms, sweeps, each panel's arms, starts, θ*, the world) comes from the
driver's files beside the table: results.meta.json (reproduce/jobs/collect.py writes it; common/results.py
META_NAME), steps.parquet (every run's per-step metrics) and noise_floor.json. Nothing here reads a preset
or a run folder, and no arm name is parsed: `Context` is the one reader of the driver's files.

Conventions
- Scores are fractions in [0, 1] inside this package. A (benchmark, metric) group of the results table whose
  values exceed 1 is taken to be in percent and divided by 100 on load. Tables print percent.
- `step` is total RL steps since the base model (docs/CONTRACTS.md); steps.parquet carries both `step` and
  the run's own `local_step`.
- The validation benchmark is taken from the data (rows with source == "validation"): `aime24` if present,
  else the benchmark with the most validation rows; its avg@k with the largest k.
- Protocol numbers (KL read-off step, ...) come from the `protocol` argument, else results.meta.json.

Checkpoint selection (`Context.select_step`, used by the tables)
1. The step the paper reports for that row (the preset's protocol.table_steps, as results.meta.json's arm
   `table_step`) when the results table has eval rows for the arm at that step.
2. Otherwise "select by validation": among the steps that have eval rows for the arm, the one whose
   seed-mean validation avg@k (validation benchmark) is highest; ties go to the earliest step.
3. If no eval step has a validation row: the eval step with the best eval score on the validation
   benchmark if it was evaluated, else the last eval step.
With several seeds each seed is selected on its own rows (`Context.select_steps`: rule 2 on that seed's
validation, as the evaluation plan chose each seed's checkpoint), and the tables report the mean over seeds of
each seed's eval numbers at its own step (`Context.eval_rows_at`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pandas as pd
import yaml

from common.results import META_NAME, NOISE_NAME, RESULT_COLUMNS, STEPS_NAME, metric_k

PAPER_PRESETS = ("qwen25-math-7b", "qwen3-8b-base")
PAPER_YAML = Path(__file__).with_name("paper_numbers.yaml")
PREFERRED_VALIDATION = ("aime24",)

class ResultsError(ValueError):
    """A results file (the table, steps.parquet, results.meta.json, noise_floor.json) that cannot be read:
    the message names it."""


def _damaged(path, e: Exception) -> ResultsError:
    said = str(e).strip().splitlines()
    return ResultsError(f"{path}: cannot be read ({said[0] if said else type(e).__name__}): damaged or "
                        f"truncated; rerun the driver (its collect job writes it) or copy it again")


def read_table(path, **kw) -> pd.DataFrame:
    """A parquet file of the driver's (results.parquet, steps.parquet); ResultsError naming it if damaged."""
    try:
        return pd.read_parquet(path, **kw)
    except (OSError, ValueError) as e:      # pyarrow's ArrowInvalid is a ValueError
        raise _damaged(path, e) from None


def read_json_file(path) -> object:
    """A JSON file of the driver's (results.meta.json, noise_floor.json); ResultsError naming it if
    damaged."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise _damaged(path, e) from None


@lru_cache(maxsize=1)
def paper_numbers() -> dict:
    """The paper's numbers (figures/paper_numbers.yaml), parsed once."""
    return yaml.safe_load(PAPER_YAML.read_text()) or {}


def paper_preset(preset: str) -> dict:
    return (paper_numbers().get("presets") or {}).get(preset) or {}


# a sweep's plot order: by its value, largest first for these families (results.meta.json arms' `sweep`)
REVERSED_SWEEPS = ("mix",)


# ------------------------------------------------------------------------------------------- loading
def load_results(paths: str | Path | Sequence[str | Path] | pd.DataFrame) -> pd.DataFrame:
    """Read one or more results.parquet files (or take a DataFrame) into one normalized table."""
    if isinstance(paths, pd.DataFrame):
        df = paths.copy()
    else:
        if isinstance(paths, (str, Path)):
            paths = [paths]
        frames = [read_table(p) for p in paths]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=RESULT_COLUMNS)
    missing = [c for c in RESULT_COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(f"results table lacks columns {missing} (docs/CONTRACTS.md)")
    df = df[RESULT_COLUMNS + [c for c in df.columns if c not in RESULT_COLUMNS]].copy()
    df["seed"] = pd.to_numeric(df["seed"], errors="coerce").fillna(0).astype(int)
    df["step"] = pd.to_numeric(df["step"], errors="coerce")
    df = df[df["step"].notna()]
    df["step"] = df["step"].astype(int)
    df["k"] = pd.to_numeric(df["k"], errors="coerce")
    df["value"] = pd.to_numeric(df["value"], errors="coerce").astype(float)
    for col in ("preset", "model", "arm", "benchmark", "metric", "source"):
        df[col] = df[col].astype(str)
    # percent -> fraction, per (benchmark, metric) group
    if len(df):
        gmax = df.groupby(["benchmark", "metric"])["value"].transform("max")
        df.loc[gmax > 1.0, "value"] = df.loc[gmax > 1.0, "value"] / 100.0
    return df.reset_index(drop=True)


@dataclass
class Curve:
    """Seed aggregate of one series: one row per step."""
    step: list
    mean: list
    lo: list
    hi: list
    n: list

    @classmethod
    def from_frame(cls, df: pd.DataFrame, col: str = "value") -> "Curve":
        if df is None or df.empty:
            return cls([], [], [], [], [])
        g = df.groupby("step")[col].agg(["mean", "min", "max", "count"]).reset_index().sort_values("step")
        g = g[g["mean"].notna()]
        return cls(g["step"].tolist(), g["mean"].tolist(), g["min"].tolist(), g["max"].tolist(),
                   g["count"].tolist())

    def __len__(self) -> int:
        return len(self.step)

    @property
    def empty(self) -> bool:
        return not self.step

    def at(self, step: int) -> Optional[float]:
        for s, v in zip(self.step, self.mean):
            if s == step:
                return v
        return None

    def after(self, step: int) -> "Curve":
        keep = [i for i, s in enumerate(self.step) if s > step]
        return Curve(*[[getattr(self, a)[i] for i in keep] for a in ("step", "mean", "lo", "hi", "n")])


@dataclass
class Context:
    """One preset's results plus the lookups the figures need."""
    df: pd.DataFrame
    preset: str
    runs_dir: Optional[Path] = None
    results_path: Optional[Path] = None
    protocol_override: Optional[dict] = None
    only_seed: Optional[int] = None     # a one-seed view (for_seed): its rows only
    _metrics: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)

    def _arm_df(self, arm: str) -> pd.DataFrame:
        """The arm's rows (cached; the table is read-only once loaded)."""
        by_arm = self._cache.get("by_arm")
        if by_arm is None:
            by_arm = self._cache["by_arm"] = {a: g for a, g in self.df.groupby("arm")} if len(self.df) else {}
        return by_arm.get(arm, self.df.iloc[0:0])

    # ---------------------------------------------------------------- identity
    @property
    def is_paper(self) -> bool:
        return self.preset in PAPER_PRESETS

    @property
    def paper(self) -> dict:
        return paper_preset(self.preset) if self.is_paper else {}

    @property
    def model(self) -> str:
        models = self.df["model"].dropna().unique().tolist() if len(self.df) else []
        if models:
            return str(models[0])
        return self.paper.get("model", self.preset)

    @property
    def arms(self) -> set[str]:
        return set(self.df["arm"].unique()) if len(self.df) else set()

    def has_arm(self, arm: str) -> bool:
        return arm in self.arms or bool(self.metrics(arm).shape[0])

    def arm_facts(self, arm: str) -> dict:
        """What the driver recorded of an arm (results.meta.json `arms`: stage, baseline, start, figures,
        sweep, table_step, starts, teacher_is_start), or {}."""
        facts = self.driver_meta.get("arms")
        return (facts.get(arm) or {}) if isinstance(facts, dict) else {}

    def seeds(self, arm: Optional[str] = None) -> list[int]:
        d = self.df if arm is None else self.df[self.df["arm"] == arm]
        return sorted(int(s) for s in d["seed"].unique())

    def for_seed(self, seed: int) -> "Context":
        """The same preset seen through one seed: its result rows only (per-seed verdicts). Cached: every
        check asks for the same views."""
        key = ("for_seed", int(seed))
        if key not in self._cache:
            self._cache[key] = Context(df=self.df[self.df["seed"] == seed].reset_index(drop=True),
                                       preset=self.preset, runs_dir=self.runs_dir,
                                       results_path=self.results_path,
                                       protocol_override=self.protocol_override, only_seed=int(seed))
            self._cache[key]._cache["driver_meta"] = self.driver_meta
            if "steps" in self._cache:        # the per-step table is read once, then filtered per seed
                st = self._cache["steps"]
                self._cache[key]._cache["steps"] = (st[st["seed"] == seed].reset_index(drop=True) if len(st)
                                                    else st)
        return self._cache[key]

    # ---------------------------------------------------------------- protocol
    @property
    def protocol(self) -> dict:
        """The preset's protocol: the `protocol` argument, else results.meta.json's ({} without either)."""
        if self.protocol_override:
            return dict(self.protocol_override)
        proto = self.driver_meta.get("protocol")
        return proto if isinstance(proto, dict) else {}

    @property
    def rehearsal(self) -> Optional[dict]:
        """results.meta.json `rehearsal` of a CPU rehearsal (`of`: its paper preset, `label`: what every
        figure, table and report carries, `substitutions`); None for a real run."""
        r = self.driver_meta.get("rehearsal")
        return r if isinstance(r, dict) and r.get("label") else None

    @property
    def driver_meta(self) -> dict:
        """results.meta.json beside the table, as the driver's collect wrote it ({} for a table made without
        the driver): the figure arms and the validation benchmark are read from there, not decided again."""
        if "driver_meta" not in self._cache:
            meta = self.results_path.with_name(META_NAME) if self.results_path is not None else None
            data = read_json_file(meta) if meta is not None and meta.is_file() else {}
            self._cache["driver_meta"] = data if isinstance(data, dict) else {}
        return self._cache["driver_meta"]

    @property
    def claims(self) -> dict:
        """The claims register as the driver resolved it for this preset (results.meta.json `claims`: the
        seeds' role, roles, entries with their arms and whether the preset runs them; figures/claims.py), or
        {} for results collected without it."""
        c = self.driver_meta.get("claims")
        return c if isinstance(c, dict) else {}

    def _role(self, role: str) -> dict:
        """One role of the claims register ({"arm": ..., "before": ...}), or {}."""
        r = (self.claims.get("roles") or {}).get(role)
        return r if isinstance(r, dict) else {}

    def role_arm(self, role: str) -> Optional[str]:
        """The arm that stands for one of the paper's methods in the claims register (ARMOR ->
        armor_restart), or None."""
        return self._role(role).get("arm")

    def role_curve_arms(self, role: str) -> list[str]:
        """The arms whose validation curves draw a role (ARMOR -> [armor_reset_never, armor_restart]: a
        restart after the run it restarts from), or [] when the role's arm has no curve here."""
        r = self._role(role)
        if not r.get("arm") or self.val_curve(r["arm"]).empty:
            return []
        return [x for x in (r.get("before"), r["arm"]) if x]

    @property
    def figure_arms(self) -> Optional[dict]:
        """{figure: [arms]} as the driver listed them (reproduce.matrix.arms.figure_arms), or None."""
        fa = self.driver_meta.get("figure_arms")
        return fa if isinstance(fa, dict) else None

    def panel_arms(self, figure: str, panel: str) -> Optional[list[str]]:
        """The arms a figure's panel draws, in plot order, as the driver listed them (results.meta.json
        `figure_panels`, reproduce.matrix.arms.figure_panels), or None for results collected without them."""
        fp = self.driver_meta.get("figure_panels")
        arms = (fp.get(figure) or {}).get(panel) if isinstance(fp, dict) else None
        return [str(a) for a in arms] if isinstance(arms, list) else None

    def expected_arms(self, family: str) -> list[str]:
        """The arms of a sweep (results.meta.json arms' `sweep`: kl_k3, kl_k2, mix, reset, qae_armor,
        tau1_until), in plot order: the family's reference arm (value null) first, then by value."""
        facts = self.driver_meta.get("arms")
        members = [(a, (f.get("sweep") or {}).get("value")) for a, f in (facts or {}).items()
                   if (f.get("sweep") or {}).get("family") == family]
        sign = -1.0 if family in REVERSED_SWEEPS else 1.0
        return [a for a, v in sorted(members, key=lambda t: (t[1] is not None, sign * (t[1] or 0.0), t[0]))]

    def all_arms(self) -> list[str]:
        """The arms with result rows or per-step rows."""
        arms = set(self.arms)
        if len(self.steps):
            arms |= set(self.steps["arm"].astype(str).unique())
        return sorted(arms)

    # ---------------------------------------------------------------- validation
    @property
    def val_benchmark(self) -> Optional[str]:
        if "val_benchmark" not in self._cache:
            self._cache["val_benchmark"] = self._val_benchmark()
        return self._cache["val_benchmark"]

    def _val_benchmark(self) -> Optional[str]:
        """The driver's validation benchmark (reproduce.jobs.peaks.validation_benchmark, results.meta.json);
        for a table made without the driver, aime24 if it is there, else the most frequent one."""
        v = self.df[self.df["source"] == "validation"]
        if v.empty:
            return None
        benches = v["benchmark"].value_counts()
        chosen = self.driver_meta.get("validation_benchmark")
        if chosen in benches.index:
            return str(chosen)
        for pref in PREFERRED_VALIDATION:
            if pref in benches.index:
                return pref
        return str(benches.index[0])

    @property
    def val_metric(self) -> Optional[str]:
        if "val_metric" not in self._cache:
            self._cache["val_metric"] = self._val_metric()
        return self._cache["val_metric"]

    def _val_metric(self) -> Optional[str]:
        b = self.val_benchmark
        if b is None:
            return None
        v = self.df[(self.df["source"] == "validation") & (self.df["benchmark"] == b)]
        avg = [m for m in v["metric"].unique() if metric_k(m)[0] == "avg"]
        cands = avg or list(v["metric"].unique())
        return max(cands, key=lambda m: (metric_k(m)[1] or 0))

    @property
    def val_label(self) -> str:
        if self.val_benchmark is None:
            return "validation (none in results)"
        return f"{self.val_benchmark} {self.val_metric} (validation)"

    def val_rows(self, arm: str) -> pd.DataFrame:
        d = self._arm_df(arm)
        return d[(d["source"] == "validation") & (d["benchmark"] == self.val_benchmark)
                 & (d["metric"] == self.val_metric)]

    def val_curve(self, arm: str) -> Curve:
        key = ("val_curve", arm)
        if key not in self._cache:
            self._cache[key] = Curve.from_frame(self.val_rows(arm))
        return self._cache[key]

    # ---------------------------------------------------------------- starts
    def arm_start(self, arm: str) -> Optional[int]:
        """Total step at which the arm's runs began (0 for stage-1 arms; this view's seed when it has one):
        results.meta.json's starts, else the arm's first step in the table."""
        f = self.arm_facts(arm)
        if f.get("stage") == 1:
            return 0
        starts = f.get("starts") or {}
        if self.only_seed is not None and str(self.only_seed) in starts:
            return int(starts[str(self.only_seed)])
        if starts:
            return int(min(starts.values()))
        d = self._arm_df(arm)
        if not d.empty:
            return int(d["step"].min())
        return None

    @property
    def world(self) -> dict:
        """The toy world the preset trains in (results.meta.json `world`: dir, validation_chain_ceiling)."""
        w = self.driver_meta.get("world")
        return w if isinstance(w, dict) else {}

    @property
    def live_logs(self) -> list[dict]:
        """Each run's TensorBoard folder and W&B run, relative to the runs folder (results.meta.json)."""
        v = self.driver_meta.get("live_logs")
        return v if isinstance(v, list) else []

    # ---------------------------------------------------------------- beside the table
    def _sibling(self, name: str) -> Optional[Path]:
        p = self.results_path.with_name(name) if self.results_path is not None else None
        return p if p is not None and p.is_file() else None

    @property
    def noise_floor(self) -> Optional[dict]:
        """noise_floor.json beside the table ({values, sd, range, repeats, arm, seed, step, benchmark,
        metric}), or None when the floor was not measured (then no verdict is decided)."""
        if "noise_floor" not in self._cache:
            p = self._sibling(NOISE_NAME)
            data = read_json_file(p) if p is not None else None
            ok = (isinstance(data, dict) and isinstance(data.get("sd"), (int, float))
                  and len(data.get("values", [])) > 1)
            self._cache["noise_floor"] = data if ok else None
        return self._cache["noise_floor"]

    @property
    def steps(self) -> pd.DataFrame:
        """steps.parquet beside the table (this view's seed only), or an empty frame."""
        if "steps" not in self._cache:
            p = self._sibling(STEPS_NAME)
            df = (read_table(p) if p is not None
                  else pd.DataFrame(columns=["arm", "seed", "step", "local_step"]))
            if self.only_seed is not None and len(df):
                df = df[df["seed"] == self.only_seed].reset_index(drop=True)
            self._cache["steps"] = df
        return self._cache["steps"]

    def metrics(self, arm: str) -> pd.DataFrame:
        """All seeds' per-step metric rows of an arm (steps.parquet): `step` (total), `local_step`, `seed`."""
        if arm not in self._metrics:
            st = self.steps
            d = (st[st["arm"] == arm].drop(columns=["arm"]).reset_index(drop=True) if len(st)
                 else pd.DataFrame(columns=["step", "local_step", "seed"]))
            self._metrics[arm] = d.astype({c: "float64" for c in d.columns
                                           if c not in ("seed", "step", "local_step")})
        return self._metrics[arm]

    def metric_curve(self, arm: str, key: str) -> Curve:
        ck = ("metric_curve", arm, key)
        if ck in self._cache:
            return self._cache[ck]
        m = self.metrics(arm)
        if m.empty or key not in m.columns:
            c = Curve([], [], [], [], [])
        else:
            d = m[["step", "seed", key]].copy()
            d[key] = pd.to_numeric(d[key], errors="coerce")
            c = Curve.from_frame(d.dropna(), key)
        self._cache[ck] = c
        return c

    # ---------------------------------------------------------------- protocol points
    def theta_star(self) -> Optional[int]:
        """θ*: the start of the stage-2 arms that start from DAPO's peak (results.meta.json), else the
        protocol's peak step, else the DAPO validation argmax."""
        facts = self.driver_meta.get("arms") or {}
        for arm, f in facts.items():
            if f.get("stage") == 2 and f.get("start") == "peak" and f.get("baseline") == "dapo":
                s = self.arm_start(arm)
                if s:
                    return s
        p = self.protocol.get("peak_step")
        if p:
            return int(p)
        c = self.val_curve("dapo")
        if not c.empty:
            return int(c.step[max(range(len(c)), key=lambda i: (c.mean[i], -c.step[i]))])
        return None

    def start_of(self, arms: Iterable[str], proto_key: Optional[str] = None) -> Optional[int]:
        for arm in arms:
            s = self.arm_start(arm)
            if s:
                return s
        if proto_key and self.protocol.get(proto_key):
            return int(self.protocol[proto_key])
        return None

    # ---------------------------------------------------------------- tables
    def eval_rows(self, arm: str) -> pd.DataFrame:
        key = ("eval_rows", arm)
        if key not in self._cache:
            d = self._arm_df(arm)
            self._cache[key] = d[d["source"] == "eval"]
        return self._cache[key]

    def select_step(self, arm: str, paper_step: Optional[int] = None) -> tuple[Optional[int], str]:
        """(step, how) of the checkpoint that represents `arm` in the tables; see the module docstring."""
        ev = self.eval_rows(arm)
        if ev.empty:
            return None, "no eval rows"
        eval_steps = sorted(ev["step"].unique())
        note = ""
        if paper_step is not None:
            if paper_step in eval_steps:
                return int(paper_step), "paper step"
            note = f"paper step {paper_step} not evaluated; "
        vc = self.val_curve(arm)
        cands = [(v, s) for s, v in zip(vc.step, vc.mean) if s in eval_steps]
        if cands:
            best = max(cands, key=lambda t: (t[0], -t[1]))
            return int(best[1]), note + f"best validation {self.val_benchmark} {self.val_metric}"
        if self.val_benchmark is not None:
            e = ev[(ev["benchmark"] == self.val_benchmark)]
            if not e.empty:
                g = e.groupby("step")["value"].mean()
                best = max(g.items(), key=lambda t: (t[1], -t[0]))
                return int(best[0]), note + f"best eval {self.val_benchmark} (no validation at eval steps)"
        return int(eval_steps[-1]), note + "last evaluated step (no validation at eval steps)"

    def select_steps(self, arm: str, paper_step: Optional[int] = None) -> tuple[dict[int, int], str]:
        """({seed: step}, how): each seed's checkpoint of `arm`, chosen by `select_step` on that seed's rows
        alone (a seed evaluated at its own best checkpoint is represented by it); {} when none was
        evaluated."""
        steps: dict[int, int] = {}
        hows: list[str] = []
        for seed in self.seeds(arm):
            view = self if self.only_seed == seed else self.for_seed(seed)
            step, how = view.select_step(arm, paper_step)
            if step is not None:
                steps[seed] = step
                hows += [how] if how not in hows else []
        return steps, "; ".join(hows) if hows else "no eval rows"

    def eval_rows_at(self, arm: str, steps: dict[int, int]) -> pd.DataFrame:
        """The eval rows of `arm` at each seed's step of `steps` ({seed: step}, as select_steps gives)."""
        ev = self.eval_rows(arm)
        return ev[[steps.get(int(seed)) == int(step) for seed, step in zip(ev["seed"], ev["step"])]]


def load_context(results: str | Path | Sequence[str | Path] | pd.DataFrame, preset: Optional[str] = None,
                 runs_dir: str | Path | None = None, protocol: Optional[dict] = None) -> Context:
    """One preset's Context. `runs_dir` defaults to the folder of the (first) results.parquet, which is
    runs/<preset>/ by the contract."""
    df = load_results(results)
    presets = sorted(df["preset"].unique()) if len(df) else []
    if preset is None:
        if len(presets) > 1:
            raise ValueError(f"results hold several presets {presets}; pass preset=")
        preset = presets[0] if presets else "unknown"
    results_path = None
    if not isinstance(results, pd.DataFrame):
        first = results if isinstance(results, (str, Path)) else (list(results)[0] if results else None)
        results_path = Path(first) if first is not None else None
    if runs_dir is None and results_path is not None:
        runs_dir = results_path.parent
    return Context(df=df[df["preset"] == preset].reset_index(drop=True), preset=preset,
                   runs_dir=Path(runs_dir) if runs_dir is not None else None, results_path=results_path,
                   protocol_override=protocol)


def load_contexts(results, runs_dir=None) -> list[Context]:
    """One Context per preset in the results (for tables that span models)."""
    df = load_results(results)
    paths = [] if isinstance(results, pd.DataFrame) else ([results] if isinstance(results, (str, Path))
                                                           else list(results))
    out = []
    for preset in sorted(df["preset"].unique()):
        path = None
        for p in paths:  # the file that holds this preset, for its runs folder / metadata
            try:
                if preset in set(read_table(p, columns=["preset"])["preset"].astype(str)):
                    path = Path(p)
                    break
            except Exception:  # noqa: BLE001
                continue
        rd = runs_dir if runs_dir is not None else (path.parent if path is not None else None)
        out.append(Context(df=df[df["preset"] == preset].reset_index(drop=True), preset=preset,
                           runs_dir=Path(rd) if rd is not None else None, results_path=path))
    return out

"""Benchmark registry, loaders and prompt templates (part of the recorded evaluation protocol).

Every benchmark has a local copy shipped in ``common/data/benchmarks`` (provenance:
``common/data/SOURCES.md``), except GPQA-Diamond (gated; hub or a user-given file only).
``load_benchmark(name, source)`` reads

* ``source="auto"`` (default): the shipped file if there is one, else the hub;
* ``source="local"``: the shipped file;
* ``source="hub"``: the Hugging Face hub via ``datasets`` (optional dependency, imported lazily);
* any other string: a path to a ``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` file with the benchmark's
fields.

All validation (unknown benchmark, missing file, malformed row) happens at load time, before any generation,
and errors name the benchmark, file, row and field.

Names: ``aime24`` (30), ``aime25`` (30), ``amc23`` (40 AMC 2023 problems, Qwen-Math / SimpleRL),
``amc`` (83 AMC 2022+2023 problems, ``AI-MO/aimo-validation-amc``; alias ``amc_aimo83``), ``math500`` (500),
``minerva_math`` (272), ``olympiadbench`` (675, OE_TO_maths_en_COMP), ``mmlu_pro`` (hub: the full 12,032
question ``TIGER-Lab/MMLU-Pro`` test set; local/auto: the shipped 300-question sample, reported as
``mmlu_pro_sample300`` because its scores are not comparable with published MMLU-Pro numbers; alias
``mmlu_pro_sample300`` always means the sample), ``gpqa_diamond`` (hub ``Idavidrein/gpqa`` config
``gpqa_diamond``, gated, not shipped; options shuffled with a fixed seed, the gold is the letter).
Toy-world splits are added at run time with ``register_jsonl``.

The hub ids/field names were chosen from the public dataset cards; they cannot be checked offline. Field
lookups try several candidate names and a mismatch raises an error listing the fields that are present.
"""
from __future__ import annotations

import ast
import csv
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from common.grading import extract_boxed, normalize_gold
from common.jsonl import numbered_objects

__all__ = [
    "DATA_DIR", "BENCHMARK_DIR", "TRAIN_DIR", "DAPO_MATH_17K",
    "Problem", "BenchmarkSpec", "BenchmarkData", "BenchmarkError",
    "BENCHMARKS", "ALIASES", "TEMPLATES", "TEMPLATE_MODES", "SYSTEM_PROMPT_BOXED", "DAPO_PROMPT",
    "get_spec", "list_benchmarks", "register_benchmark", "register_jsonl", "load_benchmark",
    "report_name", "build_messages", "default_mode",
]

DATA_DIR = Path(__file__).resolve().parent / "data"   # the shipped files live with the registry
BENCHMARK_DIR = DATA_DIR / "benchmarks"
TRAIN_DIR = DATA_DIR / "train"
#: the paper's training set (17,917 rows; reward_model.ground_truth are integers); see common/data/SOURCES.md
DAPO_MATH_17K = TRAIN_DIR / "dapo_math_17k.parquet"

GPQA_SHUFFLE_SEED = 0
LETTERS = "ABCDEFGHIJ"


class BenchmarkError(ValueError):
    """Unknown benchmark, missing file, or malformed data. The message names the benchmark/file/row/field."""


@dataclass
class Problem:
    """One benchmark problem.

    index: 0-based row in the benchmark (the key of a response row in ``eval.grade``).
    problem: the problem text shown to the model (options included for multiple choice).
    gold: normalized gold answer (a string; for multiple choice the letter).
    answer_type: "math" or "mc".
    choices: option texts in letter order for multiple choice, else None.
    meta: other scalar fields of the source row (id, subject, level, unit, ...).
    """

    index: int
    problem: str
    gold: str
    answer_type: str = "math"
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkSpec:
    """How to load one benchmark.

    local_file: file name inside ``common/data/benchmarks`` or an absolute path; None if not shipped.
    hf_id / hf_split / hf_config: hub location (``datasets.load_dataset(hf_id, hf_config, split=hf_split)``).
    problem_fields / answer_fields: candidate field names, the first present in a row is used.
    gold_kind: "answer" (the field, normalized: "27.0" -> "27"), "last_boxed" (last ``\\boxed{}`` of the
        field), "list" (a list or stringified list of answers, joined with ", "), "letter" (an option letter),
        "gpqa" (GPQA's Correct/Incorrect Answer columns; options shuffled with a fixed seed).
    options_field: for hub multiple choice whose options are a separate list (MMLU-Pro).
    answer_type: "math" or "mc". template: default prompt template (key of TEMPLATES).
    expected_count: the size of the full benchmark (checked by tests; loading does not enforce it).
    local_report_name: name reported in result tables when the local copy is used (if different).
    """

    name: str
    local_file: str | None
    hf_id: str | None = None
    hf_split: str | None = None
    hf_config: str | None = None
    problem_fields: tuple[str, ...] = ("problem",)
    answer_fields: tuple[str, ...] = ("answer",)
    gold_kind: str = "answer"
    options_field: str | None = None
    answer_type: str = "math"
    template: str = "qwen_math"
    expected_count: int | None = None
    local_report_name: str | None = None
    gated: bool = False
    notes: str = ""

    def local_path(self) -> Path | None:
        if self.local_file is None:
            return None
        p = Path(self.local_file)
        return p if p.is_absolute() else BENCHMARK_DIR / p


class BenchmarkData(list):
    """A list of Problem with where it came from: ``name``, ``report_name``, ``source``, ``spec``."""

    def __init__(self, problems: Iterable[Problem], *, name: str, report_name: str, source: str,
                 spec: BenchmarkSpec):
        super().__init__(problems)
        self.name = name
        self.report_name = report_name
        self.source = source
        self.spec = spec


_MATH = dict(answer_type="math", template="qwen_math")

BENCHMARKS: dict[str, BenchmarkSpec] = {
    "aime24": BenchmarkSpec("aime24", "aime24.jsonl", "HuggingFaceH4/aime_2024", "train",
                            problem_fields=("problem", "question"), expected_count=30, **_MATH),
    "aime25": BenchmarkSpec("aime25", "aime25.jsonl", "math-ai/aime25", "test",
                            problem_fields=("problem", "question"), expected_count=30, **_MATH),
    "amc23": BenchmarkSpec("amc23", "amc23.jsonl", "math-ai/amc23", "test",
                           problem_fields=("problem", "question"), expected_count=40,
                           notes="golds are floats like 27.0 in the source, normalized to '27'", **_MATH),
    "amc": BenchmarkSpec("amc", "amc_aimo83.jsonl", "AI-MO/aimo-validation-amc", "train",
                         problem_fields=("problem", "question"), expected_count=83,
                         notes="AMC 2022+2023 (83 problems) as in Oat-Zero / LUFFY; amc23 is a subset",
                         **_MATH),
    "math500": BenchmarkSpec("math500", "math500.jsonl", "HuggingFaceH4/MATH-500", "test",
                             expected_count=500, **_MATH),
    "minerva_math": BenchmarkSpec("minerva_math", "minerva_math.jsonl", "svc-huggingface/minerva-math",
                                  "test", answer_fields=("solution",), gold_kind="last_boxed",
                                  expected_count=272, notes="gold = last \\boxed{} of the solution", **_MATH),
    "olympiadbench": BenchmarkSpec("olympiadbench", "olympiadbench.jsonl", "Hothan/OlympiadBench", "train",
                                   hf_config="OE_TO_maths_en_COMP", problem_fields=("question", "problem"),
                                   answer_fields=("final_answer",), gold_kind="list", expected_count=675,
                                   notes="final_answer is a list; several answers are joined with ', '",
                                   **_MATH),
    "mmlu_pro": BenchmarkSpec("mmlu_pro", "mmlu_pro_sample300.jsonl", "TIGER-Lab/MMLU-Pro", "test",
                              problem_fields=("question",), answer_fields=("answer",), gold_kind="letter",
                              options_field="options", answer_type="mc", template="mc", expected_count=12032,
                              local_report_name="mmlu_pro_sample300",
                              notes="local copy = 300-question random sample; not comparable with published "
                                    "MMLU-Pro numbers"),
    "mmlu_pro_sample300": BenchmarkSpec("mmlu_pro_sample300", "mmlu_pro_sample300.jsonl", None, None,
                                        problem_fields=("question",), gold_kind="letter", answer_type="mc",
                                        template="mc", expected_count=300),
    "gpqa_diamond": BenchmarkSpec("gpqa_diamond", None, "Idavidrein/gpqa", "train", hf_config="gpqa_diamond",
                                  problem_fields=("Question",), answer_fields=("Correct Answer",),
                                  gold_kind="gpqa", answer_type="mc", template="mc", expected_count=198,
                                  gated=True,
                                  notes="gated on the hub and not shipped; pass source=<path to "
                                        "gpqa_diamond.csv> if you have it"),
}
ALIASES = {"amc_aimo83": "amc", "math_500": "math500", "minerva": "minerva_math",
           "olympiad_bench": "olympiadbench", "gpqa": "gpqa_diamond"}
_BUILTIN = frozenset(BENCHMARKS)


def list_benchmarks() -> list[str]:
    """Registered benchmark names."""
    return sorted(BENCHMARKS)


def get_spec(name: str) -> BenchmarkSpec:
    """The BenchmarkSpec of ``name`` (aliases accepted); BenchmarkError naming it if unknown."""
    key = ALIASES.get(name, name)
    try:
        return BENCHMARKS[key]
    except KeyError:
        raise BenchmarkError(f"unknown benchmark {name!r}; registered: "
                             f"{', '.join(list_benchmarks())}") from None


def register_benchmark(spec: BenchmarkSpec, *, overwrite: bool = False) -> BenchmarkSpec:
    """Add a benchmark to the registry (built-in names cannot be replaced)."""
    if spec.name in _BUILTIN:
        raise BenchmarkError(f"cannot replace the built-in benchmark {spec.name!r}")
    if spec.name in BENCHMARKS and not overwrite:
        raise BenchmarkError(f"benchmark {spec.name!r} is already registered (pass overwrite=True)")
    if spec.answer_type not in ("math", "mc"):
        raise BenchmarkError(f"{spec.name}: unknown answer_type {spec.answer_type!r} "
                             f"(expected 'math' or 'mc')")
    if spec.template not in TEMPLATES:
        raise BenchmarkError(f"{spec.name}: unknown template {spec.template!r}; known: {sorted(TEMPLATES)}")
    BENCHMARKS[spec.name] = spec
    return spec


def register_jsonl(name: str, path: str | os.PathLike, problem_field: str = "problem",
                   answer_field: str = "answer", *, answer_type: str = "math", template: str = "qwen_math",
                   overwrite: bool = True) -> BenchmarkSpec:
    """Register a benchmark-style JSON-lines file (e.g. a tiny-world split with fields problem/answer).

    The file is read (and validated) by ``load_benchmark(name)``; a missing file raises then.
    """
    spec = BenchmarkSpec(name=name, local_file=str(Path(path).resolve()), problem_fields=(problem_field,),
                         answer_fields=(answer_field,),
                         gold_kind="letter" if answer_type == "mc" else "answer",
                         answer_type=answer_type, template=template)
    return register_benchmark(spec, overwrite=overwrite)


def report_name(name: str, source: str = "auto") -> str:
    """Name to use in result tables for ``load_benchmark(name, source)`` (e.g. ``mmlu_pro_sample300``)."""
    spec = get_spec(name)
    kind = _source_kind(spec, source)
    if kind == "local" and spec.local_report_name:
        return spec.local_report_name
    return spec.name


# --------------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------------
def _source_kind(spec: BenchmarkSpec, source: str) -> str:
    if source == "auto":  # the local copy if it exists (or if there is no hub alternative), else the hub
        lp = spec.local_path()
        return "local" if lp is not None and (lp.exists() or not spec.hf_id) else "hub"
    if source in ("local", "hub"):
        return source
    return "path"


def _read_rows(path: Path, bench: str) -> list[dict]:
    """Rows of a .jsonl / .json / .csv / .parquet file;
    BenchmarkError naming the file and line if malformed."""
    if not path.exists():
        raise BenchmarkError(f"{bench}: data file not found: {path}")
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    try:
        if suffix in (".jsonl", ".ndjson"):
            try:
                return [row for _, row in numbered_objects(path)]
            except ValueError as e:
                raise BenchmarkError(f"{bench}: {e}") from None
        if suffix == ".json":
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict):
                for key in ("data", "rows", "test", "train"):
                    if isinstance(data.get(key), list):
                        data = data[key]
                        break
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise BenchmarkError(f"{bench}: {path}: expected a JSON list of objects")
            return data
        if suffix == ".csv":
            with open(path, encoding="utf-8", newline="") as f:
                return list(csv.DictReader(f))
        if suffix == ".parquet":
            import pandas as pd  # lazy

            return pd.read_parquet(path).to_dict(orient="records")
    except BenchmarkError:
        raise
    except (OSError, ValueError) as e:
        raise BenchmarkError(f"{bench}: cannot read {path}: {e}") from e
    raise BenchmarkError(f"{bench}: unsupported file type {path.suffix!r} for {path} "
                         "(expected .jsonl, .json, .csv or .parquet)")


def _load_hub(spec: BenchmarkSpec) -> list[dict]:
    if not spec.hf_id:
        raise BenchmarkError(f"{spec.name}: no hub dataset is known for this benchmark; use source='local'")
    try:
        import datasets  # optional dependency
    except ImportError as e:
        raise BenchmarkError(f"{spec.name}: source='hub' needs the optional package `datasets` "
                             "(pip install datasets), or pass source='local' / a file path") from e
    try:
        ds = datasets.load_dataset(spec.hf_id, spec.hf_config, split=spec.hf_split)
    except Exception as e:  # network, auth (gated), missing config ...
        hint = (" (gated dataset: accept its terms on the hub and log in with `huggingface-cli login`, "
                "or pass a local file path as source)") if spec.gated else ""
        raise BenchmarkError(f"{spec.name}: could not load {spec.hf_id}"
                             f"{'/' + spec.hf_config if spec.hf_config else ''} split {spec.hf_split!r} "
                             f"from the hub: {type(e).__name__}: {e}{hint}") from e
    return [dict(r) for r in ds]


def _field(row: dict, names: tuple[str, ...], bench: str, where: str, what: str):
    for n in names:
        if n in row and row[n] is not None and not (isinstance(row[n], str) and not row[n].strip()):
            return row[n]
    present = ", ".join(sorted(map(str, row))) or "none"
    raise BenchmarkError(f"{bench}: {where}: missing or empty {what} field "
                         f"{' / '.join(repr(n) for n in names)} (fields present: {present})")


_OPTION_LINE = re.compile(r"^\s*([A-J])[\.\)]\s?(.*)$")


def _parse_embedded_options(question: str) -> list[str] | None:
    """Options embedded in an MMLU-Pro sample question ("Options are:\\nA. ...\\nB. ...")."""
    m = re.search(r"Options are:\s*\n", question)
    if not m:
        return None
    opts: list[str] = []
    for line in question[m.end():].splitlines():
        mm = _OPTION_LINE.match(line)
        if mm and mm.group(1) == LETTERS[len(opts)]:
            opts.append(mm.group(2).strip())
        elif opts and line.strip():
            opts[-1] += "\n" + line.strip()
    return opts or None


def _format_options(question: str, options: list[str]) -> str:
    body = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return f"{question.rstrip()}\n Options are:\n{body}\n"


_META_SKIP = {"problem", "question", "solution", "cot", "cot_content", "answer", "final_answer", "options",
              "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3",
              "Explanation"}


def _meta(row: dict) -> dict:
    return {k: v for k, v in row.items()
            if k not in _META_SKIP and (v is None or isinstance(v, (str, int, float, bool)))
            and not (isinstance(v, str) and len(v) > 500)}


def _to_problem(spec: BenchmarkSpec, i: int, row: dict, where: str) -> Problem:
    bench = spec.name
    if spec.gold_kind == "gpqa":
        q = str(_field(row, ("Question", "question"), bench, where, "question")).strip()
        correct = str(_field(row, ("Correct Answer",), bench, where, "answer")).strip()
        wrong = [str(_field(row, (f"Incorrect Answer {j}",), bench, where, "answer")).strip()
                 for j in (1, 2, 3)]
        opts = [correct] + wrong
        order = list(range(4))
        random.Random(GPQA_SHUFFLE_SEED * 1_000_003 + i).shuffle(order)
        options = [opts[j] for j in order]
        gold = LETTERS[order.index(0)]
        return Problem(i, _format_options(q, options), gold, "mc", options, _meta(row))

    text = _field(row, spec.problem_fields, bench, where, "problem")
    if not isinstance(text, str):
        raise BenchmarkError(f"{bench}: {where}: problem field is {type(text).__name__}, expected a string")
    raw = _field(row, spec.answer_fields, bench, where, "answer")
    choices = None
    if spec.gold_kind == "answer":
        try:
            gold = normalize_gold(raw if not isinstance(raw, (list, tuple)) else list(raw))
        except ValueError as e:
            raise BenchmarkError(f"{bench}: {where}: bad answer {raw!r}: {e}") from None
    elif spec.gold_kind == "last_boxed":
        gold = extract_boxed(str(raw))
        if gold is None:
            raise BenchmarkError(f"{bench}: {where}: no \\boxed{{}} answer in field "
                                 f"{spec.answer_fields[0]!r}")
        gold = normalize_gold(gold)
    elif spec.gold_kind == "list":
        val = raw
        if isinstance(val, str) and val.strip().startswith("["):
            try:
                val = ast.literal_eval(val.strip())
            except (ValueError, SyntaxError):
                raise BenchmarkError(f"{bench}: {where}: answer field {spec.answer_fields[0]!r} is not a "
                                     f"valid list: {raw[:80]!r}") from None
        if hasattr(val, "tolist"):
            val = val.tolist()
        val = list(val) if isinstance(val, (list, tuple)) else [val]
        gold = normalize_gold([str(v) for v in val])
    elif spec.gold_kind == "letter":
        raw_s = str(raw).strip().strip("()").strip()
        if len(raw_s) != 1 or raw_s.upper() not in LETTERS:
            raise BenchmarkError(f"{bench}: {where}: answer {raw!r} is not an option letter A-J")
        gold = raw_s.upper()
        opts = row.get(spec.options_field) if spec.options_field else None
        if hasattr(opts, "tolist"):
            opts = opts.tolist()
        if isinstance(opts, (list, tuple)) and opts:
            choices = [str(o) for o in opts]
            text = _format_options(text, choices)
        else:
            choices = _parse_embedded_options(text)
        if choices is not None and LETTERS.index(gold) >= len(choices):
            raise BenchmarkError(f"{bench}: {where}: answer {gold!r} but only {len(choices)} options")
    else:  # pragma: no cover - specs are ours
        raise BenchmarkError(f"{bench}: unknown gold_kind {spec.gold_kind!r}")
    if not gold:
        raise BenchmarkError(f"{bench}: {where}: empty gold answer")
    return Problem(i, text, gold, spec.answer_type, choices, _meta(row))


def load_benchmark(name: str, source: str | os.PathLike = "auto", limit: int | None = None) -> BenchmarkData:
    """Load a registered benchmark as a list of Problem (a ``BenchmarkData`` with name/report_name/source).

    source: "auto" | "local" | "hub" | a file path. limit: keep the first ``limit`` problems.
    Raises BenchmarkError (a ValueError) naming the benchmark / file / row / field on any problem.
    """
    spec = get_spec(name)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise BenchmarkError(f"{spec.name}: limit must be a positive integer or None, got {limit!r}")
    source = os.fspath(source)
    kind = _source_kind(spec, source)
    if kind == "local":
        path = spec.local_path()
        if path is None:
            raise BenchmarkError(f"{spec.name}: no local copy is shipped ({spec.notes or 'hub only'}); "
                                 "use source='hub' or a file path")
        rows = _read_rows(path, spec.name)
        src = str(path)
    elif kind == "hub":
        rows = _load_hub(spec)
        src = f"hub:{spec.hf_id}" + (f"/{spec.hf_config}" if spec.hf_config else "") + f":{spec.hf_split}"
    else:
        path = Path(source).expanduser()
        rows = _read_rows(path, spec.name)
        src = str(path)
    if not rows:
        raise BenchmarkError(f"{spec.name}: {src} has no rows")
    if limit is not None:
        rows = rows[:limit]
    problems = [_to_problem(spec, i, r, f"row {i} of {src}") for i, r in enumerate(rows)]
    rep = spec.local_report_name if (kind == "local" and spec.local_report_name) else spec.name
    if kind == "path" and spec.local_report_name and Path(source).name == Path(spec.local_file or "").name:
        rep = spec.local_report_name
    return BenchmarkData(problems, name=spec.name, report_name=rep, source=src, spec=spec)


# --------------------------------------------------------------------------------------------------
# prompt templates
# --------------------------------------------------------------------------------------------------
#: Qwen2.5-Math evaluation ("qwen25-math-cot"): this system prompt, the question as the user message.
SYSTEM_PROMPT_BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
#: DAPO's training prompt (the user message); answers are read from the last "Answer:" line.
DAPO_PROMPT = ("Solve the following math problem step by step. The last line of your response should be of "
               "the form Answer: $Answer (without quotes) where $Answer is the answer to the "
               "problem.\n\n{problem}\n\nRemember to put your answer on its own line after \"Answer:\".")
MC_INSTRUCTION = "Answer with the letter of the correct option, within \\boxed{} (for example \\boxed{A})."


def _qwen_math(p: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT_BOXED}, {"role": "user", "content": p}]


def _dapo(p: str) -> list[dict]:
    return [{"role": "user", "content": DAPO_PROMPT.replace("{problem}", p)}]


def _plain(p: str) -> list[dict]:
    return [{"role": "user", "content": p}]


def _mc(p: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT_BOXED},
            {"role": "user", "content": f"{p.rstrip()}\n\n{MC_INSTRUCTION}"}]


TEMPLATES: dict[str, Callable[[str], list[dict]]] = {
    "qwen_math": _qwen_math, "dapo": _dapo, "plain": _plain, "mc": _mc,
}
#: extraction mode (common.grading) that matches each template's instruction
TEMPLATE_MODES = {"qwen_math": "boxed", "dapo": "answer_line", "plain": "boxed_or_answer_line", "mc": "boxed"}


def build_messages(problem: Problem | str, template: str | None = None) -> list[dict]:
    """Chat messages for one problem (the caller applies the tokenizer's chat template).

    template: "qwen_math" (system: "Please reason step by step, and put your final answer within \\boxed{}.",
    user: the problem — as Qwen2.5-Math's evaluation), "dapo" (DAPO's user prompt with the "Answer:" line),
    "plain" (the problem as the user message), "mc" (qwen_math's system prompt; the question with its options
    and an instruction to box the letter). Default: the qwen_math template, or "mc" for a multiple-choice
    Problem.
    """
    if isinstance(problem, Problem):
        text = problem.problem
        if template is None:
            template = "mc" if problem.answer_type == "mc" else "qwen_math"
    elif isinstance(problem, str):
        text = problem
        template = template or "qwen_math"
    else:
        raise TypeError(f"problem must be a Problem or str, got {type(problem).__name__}")
    try:
        fn = TEMPLATES[template]
    except KeyError:
        raise ValueError(f"unknown prompt template {template!r}; known: {sorted(TEMPLATES)}") from None
    return fn(text)


def default_mode(template: str) -> str:
    """The answer-extraction mode matching a prompt template."""
    try:
        return TEMPLATE_MODES[template]
    except KeyError:
        raise ValueError(f"unknown prompt template {template!r}; known: {sorted(TEMPLATES)}") from None

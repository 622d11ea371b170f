"""Tests for common.benchmarks: registry, shipped data, loaders, errors, prompt templates."""
from __future__ import annotations

import csv
import hashlib
import json
import re
import sys
import types
from pathlib import Path

import pytest

from common import benchmarks as B
from common.benchmarks import (BENCHMARK_DIR, DAPO_MATH_17K, DAPO_PROMPT, SYSTEM_PROMPT_BOXED, BenchmarkError,
                               BenchmarkSpec, Problem, build_messages, default_mode, get_spec, load_benchmark,
                               register_jsonl, report_name)

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(autouse=True)
def _restore_registry():
    """Benchmarks registered by a test do not leak into other tests."""
    before = dict(B.BENCHMARKS)
    yield
    B.BENCHMARKS.clear()
    B.BENCHMARKS.update(before)


COUNTS = {"aime24": 30, "aime25": 30, "amc23": 40, "amc": 83, "math500": 500, "minerva_math": 272,
          "olympiadbench": 675, "mmlu_pro": 300}
FIRST_GOLDS = {"aime24": "204", "aime25": "70", "amc23": "27", "amc": "142",
               "math500": r"\left( 3, \frac{\pi}{2} \right)", "minerva_math": "1.6", "olympiadbench": "2",
               "mmlu_pro": "A"}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_counts_and_golds(name):
    data = load_benchmark(name)
    assert len(data) == COUNTS[name]
    assert data[0].gold == FIRST_GOLDS[name]
    assert [p.index for p in data] == list(range(len(data)))
    for p in data:
        assert isinstance(p.problem, str) and p.problem.strip()
        assert isinstance(p.gold, str) and p.gold.strip() and "$" not in p.gold
    assert Path(data.source).resolve().is_relative_to(ROOT / "common" / "data")


def test_specific_golds():
    amc = load_benchmark("amc23")
    assert all(not g.endswith(".0") for g in (p.gold for p in amc))
    amc83 = {p.problem[:60]: p.gold for p in load_benchmark("amc")}
    assert all(amc83[p.problem[:60]] == p.gold for p in amc)  # amc23 is a subset of the 83-problem set
    minerva = load_benchmark("minerva_math")
    assert minerva[1].gold == "4.5e33"  # the last \boxed{} of the solution
    ob = load_benchmark("olympiadbench")
    multi = [p for p in ob if p.meta.get("is_multiple_answer")]
    assert len(multi) == 94
    assert ob[0].meta["id"] == 1606
    assert ob[13].gold == "69,84" and ob[38].gold == "-2,0,2"  # lists of answers: "$" removed, kept whole
    m5 = load_benchmark("math500")
    assert m5[0].meta["unique_id"] == "test/precalculus/807.json"


def test_mmlu_pro_sample_naming_and_choices():
    data = load_benchmark("mmlu_pro")
    assert data.report_name == "mmlu_pro_sample300"
    assert report_name("mmlu_pro") == "mmlu_pro_sample300"
    assert report_name("mmlu_pro", "hub") == "mmlu_pro"
    assert load_benchmark("mmlu_pro_sample300").report_name == "mmlu_pro_sample300"
    for p in data:
        assert p.answer_type == "mc" and p.gold in "ABCDEFGHIJ"
        assert p.choices and "ABCDEFGHIJ".index(p.gold) < len(p.choices)
    assert data[0].choices[4] == "Detection of radio signals from the meteorite"


def test_aliases_and_registry():
    assert get_spec("amc_aimo83").name == "amc"
    assert get_spec("gpqa").name == "gpqa_diamond"
    for name in COUNTS:
        assert get_spec(name).expected_count is not None
    assert get_spec("olympiadbench").hf_config == "OE_TO_maths_en_COMP"
    assert get_spec("gpqa_diamond").local_file is None and get_spec("gpqa_diamond").gated


def test_shipped_files_match_sources_md():
    text = (ROOT / "common" / "data" / "SOURCES.md").read_text()
    rows = re.findall(r"^\| (benchmarks/\S+|train/\S+) \|.*\| ([0-9a-f]{8})… \|$", text, flags=re.M)
    assert len(rows) == 9
    for rel, prefix in rows:
        path = ROOT / "common" / "data" / rel
        assert hashlib.sha256(path.read_bytes()).hexdigest().startswith(prefix), rel
    assert DAPO_MATH_17K.exists() and DAPO_MATH_17K.stat().st_size > 2_000_000


def test_dapo_parquet_readable():
    import pandas as pd

    df = pd.read_parquet(DAPO_MATH_17K)
    assert len(df) == 17917
    assert df.iloc[0]["reward_model"]["ground_truth"] == "34"


def test_no_runtime_reference_to_shared():
    grading = sorted(str(f.relative_to(ROOT)) for f in (ROOT / "common" / "grading").glob("*.py"))
    assert grading, "common/grading/ has no modules"
    for f in grading + ["common/benchmarks.py", "common/metrics.py", "eval/grade.py", "bench/grading.py"]:
        src = (ROOT / f).read_text()
        assert ".." + "/shared" not in src and "/work" + "/shared" not in src, f
    assert BENCHMARK_DIR.resolve().is_relative_to(ROOT)


# ---------------------------------------------------------------------------------------------- errors
def test_unknown_benchmark():
    with pytest.raises(BenchmarkError, match="unknown benchmark 'aime23'"):
        load_benchmark("aime23")


def test_missing_file(tmp_path):
    with pytest.raises(BenchmarkError, match=r"aime24: data file not found: .*nope\.jsonl"):
        load_benchmark("aime24", tmp_path / "nope.jsonl")
    register_jsonl("toy_missing", tmp_path / "absent.jsonl")
    with pytest.raises(BenchmarkError, match="toy_missing: data file not found"):
        load_benchmark("toy_missing")


def test_malformed_rows(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n"
                 + json.dumps({"problem": "2+2?"}) + "\n")
    with pytest.raises(BenchmarkError,
                       match=r"aime24: row 1 of .*bad\.jsonl: missing or empty answer field 'answer'"
                                             r" \(fields present: problem\)"):
        load_benchmark("aime24", f)
    f.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    with pytest.raises(BenchmarkError,
                       match="missing or empty problem field 'problem' / 'question'|fields present"):
        load_benchmark("math500", f)
    f.write_text('{"problem": "x", "answer": "1"}\n{not json\n')
    with pytest.raises(BenchmarkError, match=r"line 2: invalid JSON"):
        load_benchmark("aime24", f)
    f.write_text(json.dumps({"problem": "x", "solution": "no box here"}) + "\n")
    with pytest.raises(BenchmarkError,
                       match=r"minerva_math: row 0 .*no \\boxed\{\} answer in field 'solution'"):
        load_benchmark("minerva_math", f)
    f.write_text(json.dumps({"question": "x\n Options are:\nA. a\nB. b\n", "answer": "Q"}) + "\n")
    with pytest.raises(BenchmarkError, match="answer 'Q' is not an option letter"):
        load_benchmark("mmlu_pro", f)
    f.write_text("")
    with pytest.raises(BenchmarkError, match="has no rows"):
        load_benchmark("aime24", f)
    (tmp_path / "x.txt").write_text("a")
    with pytest.raises(BenchmarkError, match="unsupported file type '.txt'"):
        load_benchmark("aime24", tmp_path / "x.txt")
    with pytest.raises(BenchmarkError, match="limit"):
        load_benchmark("aime24", limit=0)


def test_gpqa_not_shipped_and_hub_errors(monkeypatch):
    with pytest.raises(BenchmarkError, match="gpqa_diamond: no local copy is shipped"):
        load_benchmark("gpqa_diamond", "local")
    fake = types.ModuleType("datasets")

    def boom(*a, **k):
        raise ConnectionError("no network")

    fake.load_dataset = boom
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(BenchmarkError, match=r"could not load Idavidrein/gpqa/gpqa_diamond .*gated"):
        load_benchmark("gpqa_diamond")  # auto -> hub (nothing local)
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(BenchmarkError, match="needs the optional package `datasets`"):
        load_benchmark("aime24", "hub")


def _gpqa_rows(n=6):
    return [{"Question": f"Q{i}?", "Correct Answer": f"right{i}", "Incorrect Answer 1": f"w{i}a",
             "Incorrect Answer 2": f"w{i}b", "Incorrect Answer 3": f"w{i}c", "Explanation": "..."}
            for i in range(n)]


def test_gpqa_from_user_csv_and_hub(tmp_path, monkeypatch):
    path = tmp_path / "gpqa_diamond.csv"
    rows = _gpqa_rows()
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    a = load_benchmark("gpqa_diamond", path)
    b = load_benchmark("gpqa_diamond", str(path))
    assert [p.gold for p in a] == [p.gold for p in b]  # fixed-seed shuffle: deterministic
    for i, p in enumerate(a):
        assert p.answer_type == "mc" and len(p.choices) == 4
        assert p.choices["ABCD".index(p.gold)] == f"right{i}"
        assert f"{p.gold}. right{i}" in p.problem
    assert len({p.gold for p in load_benchmark("gpqa_diamond", path)}) > 1 or len(a) < 4
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda *a, **k: rows
    monkeypatch.setitem(sys.modules, "datasets", fake)
    hub = load_benchmark("gpqa_diamond", "hub")
    assert [p.gold for p in hub] == [p.gold for p in a] and hub.source.startswith("hub:Idavidrein/gpqa")


def test_mmlu_pro_hub_format(monkeypatch):
    rows = [{"question": "What is 2+2?", "options": ["3", "4", "5"], "answer": "B", "answer_index": 1,
             "category": "math"}]
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, config, split: (rows if (name, split) == ("TIGER-Lab/MMLU-Pro", "test")
                                                     else 1 / 0)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    data = load_benchmark("mmlu_pro", "hub")
    assert data.report_name == "mmlu_pro"
    p = data[0]
    assert p.gold == "B" and p.choices == ["3", "4", "5"] and p.meta["category"] == "math"
    assert p.problem == "What is 2+2?\n Options are:\nA. 3\nB. 4\nC. 5\n"


def test_olympiad_stringified_list(tmp_path):
    f = tmp_path / "ob.jsonl"
    f.write_text(json.dumps({"question": "q", "final_answer": "['$1$', '$\\\\frac{1}{2}$']"}) + "\n"
                 + json.dumps({"question": "q2", "final_answer": ["$(1,2),(3,4)$"]}) + "\n")
    data = load_benchmark("olympiadbench", f)
    assert [p.gold for p in data] == ["1, \\frac{1}{2}", "(1,2),(3,4)"]


def test_register_jsonl_toy_world(tmp_path):
    f = tmp_path / "test.jsonl"
    f.write_text("".join(json.dumps({"problem": f"{i}+{i}=?", "answer": 2 * i}) + "\n" for i in range(5)))
    spec = register_jsonl("toy_split", f)
    assert isinstance(spec, BenchmarkSpec)
    data = load_benchmark("toy_split")
    assert [p.gold for p in data] == ["0", "2", "4", "6", "8"] and data.report_name == "toy_split"
    assert len(load_benchmark("toy_split", limit=2)) == 2
    register_jsonl("toy_split", f, problem_field="q")  # re-register with other fields
    with pytest.raises(BenchmarkError, match="toy_split: row 0 .*'q'"):
        load_benchmark("toy_split")
    with pytest.raises(BenchmarkError, match="built-in"):
        register_jsonl("aime24", f)
    from common.grading import Grader

    register_jsonl("toy_split", f)
    data = load_benchmark("toy_split")
    with Grader(num_workers=0) as g:
        v = g.grade([f"\\boxed{{{p.gold}}}" for p in data], [p.gold for p in data])
    assert all(x.correct for x in v)


# ---------------------------------------------------------------------------------------------- prompts
def test_templates():
    p = Problem(0, "What is 1+1?", "2")
    assert build_messages(p, "qwen_math") == [
        {"role": "system",
         "content": "Please reason step by step, and put your final answer within \\boxed{}."},
        {"role": "user", "content": "What is 1+1?"}]
    assert SYSTEM_PROMPT_BOXED == "Please reason step by step, and put your final answer within \\boxed{}."
    dapo = build_messages("What is 1+1?", "dapo")
    assert dapo == [{"role": "user", "content": (
        "Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\nWhat is 1+1?\n\n"
        "Remember to put your answer on its own line after \"Answer:\".")}]
    assert DAPO_PROMPT.count("{problem}") == 1
    assert build_messages(p, "plain") == [{"role": "user", "content": "What is 1+1?"}]
    assert build_messages(p) == build_messages(p, "qwen_math")
    mc = load_benchmark("mmlu_pro", limit=1)[0]
    msgs = build_messages(mc)
    assert msgs[0]["content"] == SYSTEM_PROMPT_BOXED and "J. Complex organic" in msgs[1]["content"]
    assert "letter" in msgs[1]["content"]
    assert build_messages("braces {x} stay", "dapo")[0]["content"].count("{x}") == 1
    assert default_mode("qwen_math") == "boxed" and default_mode("dapo") == "answer_line"
    with pytest.raises(ValueError, match="unknown prompt template 'chatml'"):
        build_messages(p, "chatml")
    with pytest.raises(ValueError, match="unknown prompt template"):
        default_mode("chatml")
    for name in COUNTS:
        assert get_spec(name).template in B.TEMPLATES

"""eval.evaluate (over eval.settings / plan / execute / metadata) and eval.protocols on the tiny world: end to
end, --run skipping, kill + resume, bad inputs."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from common.results import RESULT_COLUMNS
from eval import evaluate as E
from eval import execute as X
from eval.metadata import run_metadata
from eval.units import resolve_max_new_tokens
from eval.protocols import DEFAULT_MAX_NEW_TOKENS, get_protocol, resolve_setting
from eval.settings import read_preset

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(grader_workers=0, progress=False, log=lambda *a: None)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def ckpt(world, tmp_path_factory) -> Path:
    """A checkpoint-like copy of the tiny base model (outputs default to CHECKPOINT/eval)."""
    d = tmp_path_factory.mktemp("ck") / "step_000007"
    shutil.copytree(world / "base_model", d)
    return d


@pytest.fixture(scope="module")
def toy(world) -> str:
    return f"toy_test={world / 'data' / 'test.jsonl'}"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------------------- protocols
def test_protocols():
    paper = get_protocol("paper")
    assert (paper.temperature, paper.top_p) == (1.0, 0.7)
    for b in ("aime24", "aime25", "amc", "amc23"):
        assert resolve_setting(paper, b).samples == 32 and resolve_setting(paper, b).pass_ks == (16,)
    for b in ("gpqa_diamond", "mmlu_pro", "mmlu_pro_sample300"):
        assert resolve_setting(paper, b).samples == 8 and resolve_setting(paper, b).pass_ks == ()
    assert resolve_setting(paper, "math500", samples=16).samples == 16
    g = get_protocol("greedy")
    assert g.temperature == 0 and resolve_setting(g, "aime24").samples == 1
    t = get_protocol("toy")
    assert (t.temperature, t.top_p, t.max_new_tokens, t.template) == (1.0, 0.7, 48, "plain")
    assert resolve_setting(t, "toy_test").samples == 4
    with pytest.raises(ValueError, match="pass@16 needs at least 16"):
        resolve_setting(paper, "aime24", samples=8)
    with pytest.raises(ValueError, match="k.* must be >= 1"):
        resolve_setting(paper, "math500", samples=0)
    with pytest.raises(ValueError, match="unknown protocol"):
        get_protocol("nope")


def test_max_new_tokens_resolution():
    paper, toy = get_protocol("paper"), get_protocol("toy")
    run_cfg = {"lengths": {"max_response": 40}}
    assert resolve_max_new_tokens(100, None, toy, run_cfg) == (100, "flag")
    q3 = read_preset(ROOT / "reproduce" / "presets" / "qwen3-8b-base.yaml")   # `base:` chain resolved
    assert resolve_max_new_tokens(None, q3, paper, run_cfg) == (20480, "preset:qwen3-8b-base")
    assert resolve_max_new_tokens(None, None, toy, run_cfg) == (48, "protocol:toy")
    assert resolve_max_new_tokens(None, None, paper, run_cfg) == (40, "run_config")
    assert resolve_max_new_tokens(None, None, paper, None) == (DEFAULT_MAX_NEW_TOKENS, "default")


def test_run_metadata(tmp_path):
    run = tmp_path / "runs" / "tiny" / "armor" / "seed3"
    m = run_metadata(run, {"name": "x", "seed": 9, "step_offset": 30,
                           "model": {"path": "Qwen/Qwen2.5-Math-7B"}},
                     run / "checkpoints" / "step_000010")
    assert (m["preset"], m["arm"], m["seed"], m["step_offset"], m["model"]) == ("tiny", "armor", 3, 30,
                                                                                 "Qwen2.5-Math-7B")
    m = run_metadata(tmp_path / "elsewhere", {"name": "qwen25-math-7b/dapo", "seed": 1}, tmp_path,
                     overrides={"arm": "dapo_x", "model": None})
    assert (m["preset"], m["arm"], m["seed"]) == ("qwen25-math-7b", "dapo_x", 1)


def test_settings_are_normalized_and_checked_where_made():
    tiny = str(ROOT / "reproduce" / "presets" / "tiny.yaml")     # a path: the harness knows no preset folder
    s = E.EvalSettings(benchmarks="a, b,", protocol="toy", pass_ks="1,2", preset=tiny)
    assert (s.benchmarks, s.protocol, s.pass_ks, s.preset["name"]) == (("a", "b"), get_protocol("toy"),
                                                                       (1, 2), "tiny")
    assert replace(s, seed=3) == E.EvalSettings(benchmarks=["a", "b"], protocol=get_protocol("toy"),
                                                pass_ks=[1, 2], preset=s.preset, seed=3)
    for bad, msg in ((dict(engine="tgi"), "unknown engine 'tgi'"),
                     (dict(seed=-1), "seed must be an integer >= 0"),
                     (dict(chunk_size=True), "chunk_size must be an integer >= 1, got True"),
                     (dict(samples=0), r"samples \(k\) must be"),
                     (dict(pass_ks="1,x"), "pass_ks: 'x' is not"),
                     (dict(limit=0), "limit must be a positive"),
                     (dict(max_new_tokens=0), "max_new_tokens must"),
                     (dict(device="tpu"), "device must be auto, cpu or cuda, got 'tpu'"),
                     (dict(template="chatml"), "unknown prompt template 'chatml'"),
                     (dict(protocol="fast"), "unknown protocol 'fast'"),
                     (dict(preset="nope"), "preset 'nope'"),
                     (dict(fast="fastest"), r"compute.fast \(--fast\): 'fastest' is not one of")):
        with pytest.raises(E.EvalError, match=msg):
            E.EvalSettings(**bad)
    # the hf engine decodes as the preset's compute.fast says (tiny: native), else auto; --fast wins
    assert s.fast == "native" and E.EvalSettings().fast == "auto"
    assert E.EvalSettings(preset={"compute": {"fast": False}}).fast == "off"       # YAML's bare `off`
    assert E.EvalSettings(preset=tiny, fast="auto").fast == "auto"
    with pytest.raises(E.EvalError, match="unknown engine"):
        replace(s, engine="tgi")                                # replace checks again


def test_chunk_seed_depends_only_on_seed_and_index():
    assert E.chunk_seed(0, 8) == E.chunk_seed(0, 8)
    assert len({E.chunk_seed(s, i) for s in range(3) for i in range(0, 64, 4)}) == 48


# --------------------------------------------------------------------------------------- end to end
def test_chunks_sized_to_the_ranks(ckpt, toy, tmp_path):
    """chunk_ranks=4: 8 problems in chunks of 2 (eval.units.chunk_problems), so 4 ranks each get one; the
    unit records the chunk size it drew with (a resume must match it)."""
    calls = []
    out = E.evaluate_checkpoint(ckpt, toy, "toy", limit=8, chunk_size=4, chunk_ranks=4, out=tmp_path / "o",
                                after_chunk=lambda unit, i: calls.append(i), **FAST)
    assert out[0]["settings"]["chunk_size"] == 2 and calls == [0, 1, 2, 3]
    with pytest.raises(E.EvalError, match="chunk_ranks must be an integer >= 1"):
        E.EvalSettings(benchmarks=toy, chunk_ranks=0)


def test_checkpoint_end_to_end(ckpt, toy, tmp_path):
    out = E.evaluate_checkpoint(ckpt, toy, "toy", limit=8, chunk_size=4, **FAST)
    assert len(out) == 1
    s = out[0]
    d = ckpt / "eval" / "step_000007"
    summ = json.loads((d / "toy_test__toy__k4.json").read_text())
    assert summ == json.loads(json.dumps(s, default=str))
    assert summ["step"] == 7 and summ["samples"] == 4 and summ["n_problems"] == 8
    assert set(summ["metrics"]) == {"avg@4", "pass@4", "maj@4"}
    st = summ["settings"]
    assert (st["protocol"], st["template"], st["samples"], st["temperature"], st["top_p"],
            st["max_new_tokens"]) \
        == ("toy", "plain", 4, 1.0, 0.7, 48)
    rows = _rows(d / "toy_test__toy__k4.samples.jsonl")
    assert len(rows) == 32
    assert {"index", "sample", "response", "extracted", "correct", "reason", "gold"} <= set(rows[0])
    assert sorted((r["index"], r["sample"]) for r in rows) == [(i, j) for i in range(8) for j in range(4)]
    acc = sum(r["correct"] for r in rows) / len(rows)
    assert summ["metrics"]["avg@4"] == pytest.approx(acc)
    # same numbers as the trainer's validation path (common.sampling.sample_and_grade) for the same chunk
    # seeds
    from common.models import load_model, load_tokenizer
    from common.rollout import SamplingParams, build_engine
    from common.benchmarks import load_benchmark
    from common.grading import Grader
    from common.sampling import sample_and_grade
    tok = load_tokenizer(str(ckpt))
    eng = build_engine("hf", load_model(str(ckpt)), tok)
    probs = load_benchmark("toy_test", limit=8)
    recs, grader = [], Grader(0, mode="boxed_or_answer_line")
    for c0 in (0, 4):
        params = SamplingParams(4, 1.0, 0.7, 48, seed=E.chunk_seed(0, c0))
        recs += sample_and_grade(eng, tok, probs[c0:c0 + 4], "plain", params, grader)
    assert [r.response for r in recs] == [r["response"] for r in rows]

    # a second call reuses the summary (no generation); a different seed is refused before generation
    calls = []
    again = E.evaluate_checkpoint(ckpt, toy, "toy", limit=8, chunk_size=4,
                                  after_chunk=lambda *a: calls.append(a), **FAST)
    assert again[0]["metrics"] == s["metrics"] and calls == []
    settings = E.EvalSettings(benchmarks=toy, protocol="toy", limit=8, chunk_size=4, grader_workers=0,
                              progress=False, log=lambda *a: None)
    assert E.evaluate_checkpoint(ckpt, settings=settings, after_chunk=lambda *a: calls.append(a)) == again
    assert calls == []                                      # the same settings as one object: reused too
    with pytest.raises(E.EvalError, match="other settings.*seed: 0 -> 1"):
        E.evaluate_checkpoint(ckpt, toy, "toy", limit=8, chunk_size=4, seed=1, **FAST)
    # only the pass ks changed: the summary is recomputed from the samples, nothing regenerated
    re = E.evaluate_checkpoint(ckpt, toy, "toy", limit=8, chunk_size=4, pass_ks=[1, 2],
                               after_chunk=lambda *a: calls.append(a), **FAST)
    assert calls == [] and set(re[0]["metrics"]) == {"avg@4", "pass@1", "pass@2", "maj@4"}
    assert re[0]["metrics"]["pass@1"] == pytest.approx(s["metrics"]["avg@4"])

    # results table rows (docs/CONTRACTS.md); appending twice does not duplicate
    res = tmp_path / "results.parquet"
    meta = {"preset": "tiny", "arm": "base", "seed": 0, "model": "tiny-lm"}
    for _ in range(2):
        E.evaluate_checkpoint(ckpt, toy, "toy", limit=8, chunk_size=4, results=res, meta=meta, **FAST)
    df = pd.read_parquet(res)
    assert list(df.columns) == RESULT_COLUMNS
    assert sorted(df["metric"]) == ["avg@4", "maj@4", "pass@4"]
    assert set(df["source"]) == {"eval"} and set(df["n"]) == {4} and set(df["step"]) == {7}


def test_paper_protocol_grades_one_generation_with_two_scorers(ckpt, toy, tmp_path):
    """The paper protocol on a math file: the DAPO prompt, math_dapo's verdicts primary and math_verify's
    beside from the same samples, pass@j and verl's best@j, the protocol card; other scorers regrade the
    stored samples without generating."""
    from common.grading import Grader
    out = tmp_path / "ev"
    kw = dict(limit=4, chunk_size=4, samples=4, pass_ks=[2], max_new_tokens=24, out=out, **FAST)
    s = E.evaluate_checkpoint(ckpt, toy, "paper", **kw)[0]
    assert set(s["metrics"]) == {"avg@4", "pass@2", "best@2", "maj@4", "avg@4/math_verify",
                                 "pass@2/math_verify", "best@2/math_verify", "maj@4/math_verify"}
    st, card = s["settings"], s["card"]
    assert (st["template"], st["scorers"], st["best_of"]) == ("dapo", ["math_dapo", "math_verify"], True)
    assert card["benchmarks"][0]["prompt"][0]["content"].startswith("Solve the following math problem")
    assert card["system_prompt"] in ("none", "added by the tokenizer's chat template")
    assert set(card["estimators"]) == {"avg", "pass", "best", "maj"} and card["benchmarks"][0]["rows"] == 4
    rows = _rows(out / "step_000007" / "toy_test__paper__k4.samples.jsonl")
    golds, texts = [r["gold"] for r in rows], [r["response"] for r in rows]
    with Grader(0, mode="answer_line", scorer="math_dapo") as g:
        assert [v.correct for v in g.grade(texts, golds)] == [r["correct"] for r in rows]
    with Grader(0, mode="answer_line") as g:
        assert [v.correct for v in g.grade(texts, golds)] == \
            [r["verdicts"]["math_verify"]["correct"] for r in rows]
    mv = sum(r["verdicts"]["math_verify"]["correct"] for r in rows) / len(rows)
    assert s["metrics"]["avg@4/math_verify"] == pytest.approx(mv)
    # math_verify alone: recomputed from the stored samples, no chunk generated
    calls = []
    again = E.evaluate_checkpoint(ckpt, toy, "paper", scorers="math_verify",
                                  after_chunk=lambda *a: calls.append(a), **kw)[0]
    assert calls == [] and again["metrics"]["avg@4"] == pytest.approx(mv)
    assert not any("/" in m for m in again["metrics"])
    # an interrupted math_verify-only evaluation resumed under the paper's scorers: the kept samples are
    # regraded, the missing chunk drawn, and the result is the uninterrupted one's
    d = out / "step_000007"
    (d / "toy_test__paper__k4.json").unlink()
    samples = d / "toy_test__paper__k4.samples.jsonl"
    samples.write_text("".join(line + "\n" for line in samples.read_text().splitlines()[:8]))
    resumed = E.evaluate_checkpoint(ckpt, toy, "paper", after_chunk=lambda *a: calls.append(a), **kw)[0]
    assert len(calls) == 1 and all("verdicts" in r for r in _rows(samples))
    assert resumed["metrics"] == pytest.approx(s["metrics"])


def test_run_skips_scored_checkpoints(world, toy, tmp_path):
    run = tmp_path / "runs" / "tiny" / "dapo" / "seed0"
    for st in (2, 4):
        d = run / "checkpoints" / f"step_{st:06d}"
        shutil.copytree(world / "base_model", d)
        (d / "trainer_state.pt").write_bytes(b"")
    (run / "config.yaml").write_text(yaml.safe_dump({
        "name": "tiny/dapo", "seed": 0, "step_offset": 10, "output_dir": str(run),
        "lengths": {"max_response": 40}, "protocol": {"eval_benchmarks": [toy], "eval_protocol": "toy"}}))
    chunks = []
    hook = lambda job, c: chunks.append((job.step, c))  # noqa: E731
    first = E.evaluate_run(run, limit=4, chunk_size=4, steps=[2], after_chunk=hook, **FAST)
    assert [s["step"] for s in first] == [2] and chunks == [(2, 0)]
    res = tmp_path / "results.parquet"
    both = E.evaluate_run(run, limit=4, chunk_size=4, after_chunk=hook, results=res, **FAST)
    assert chunks == [(2, 0), (4, 0)]                       # step 2 was already scored: not redone
    assert [s["step"] for s in both] == [2, 4] and both[0]["metrics"] == first[0]["metrics"]
    assert (run / "eval" / "step_000004" / "toy_test__toy__k4.json").is_file()
    assert both[1]["total_step"] == 14
    df = pd.read_parquet(res)
    assert set(zip(df["preset"], df["arm"], df["seed"])) == {("tiny", "dapo", 0)}
    assert sorted(set(df["step"])) == [12, 14]
    # --out named step_NNNNNN (what reproduce.jobs passes) is used as the step folder itself
    out = run / "eval" / "step_000004"
    again = E.evaluate_checkpoint(run / "checkpoints" / "step_000004", toy, "toy", limit=4, chunk_size=4,
                                  out=out, after_chunk=hook, **FAST)
    assert chunks == [(2, 0), (4, 0)] and again[0]["metrics"] == both[1]["metrics"]


_KILLABLE = """
import sys, time
import eval.evaluate as E
import eval.execute as X
orig = X.run_unit
def run_job(job, *a, **kw):
    def hook(job, c):
        print(f"CHUNK {c}", flush=True)
        if c == 0:
            time.sleep(600)
    kw["after_chunk"] = hook
    return orig(job, *a, **kw)
X.run_unit = run_job
sys.exit(E.main(sys.argv[1:]))
"""


def test_killed_evaluation_resumes(ckpt, toy, tmp_path):
    args = ["--checkpoint", str(ckpt), "--benchmarks", toy, "--protocol", "toy", "--limit", "12",
            "--chunk-size", "4", "--grader-workers", "0", "--threads", "1", "--no-progress"]
    out_k = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ARMOR_PROGRESS": "0", "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.Popen([sys.executable, "-c", _KILLABLE, *args, "--out", str(out_k)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        assert line.strip() == "CHUNK 0", line
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
    d = out_k / "step_000007"
    samples = d / "toy_test__toy__k4.samples.jsonl"
    assert not (d / "toy_test__toy__k4.json").exists()
    assert sorted({r["index"] for r in _rows(samples)}) == [0, 1, 2, 3]
    with open(samples, "a") as f:   # a torn write of the next chunk: half a problem, half a line
        f.write(json.dumps({**_rows(samples)[0], "index": 4}) + "\n" + '{"index": 4, "sample": 1, "resp')

    calls = []
    resumed = E.evaluate_checkpoint(ckpt, toy, "toy", limit=12, chunk_size=4, out=out_k,
                                    after_chunk=lambda job, c: calls.append(c), **FAST)
    assert calls == [1, 2]                                 # chunk 0 was not redone
    assert resumed[0]["stats"]["problems_generated_this_run"] == 8
    full = E.evaluate_checkpoint(ckpt, toy, "toy", limit=12, chunk_size=4, out=tmp_path / "full", **FAST)
    assert resumed[0]["metrics"] == full[0]["metrics"]
    a = _rows(samples)
    b = _rows(tmp_path / "full" / "step_000007" / "toy_test__toy__k4.samples.jsonl")
    assert a == b                                          # same samples, same order, no duplicates


def _eval_args(ckpt, toy, out) -> list[str]:
    return ["--checkpoint", str(ckpt), "--benchmarks", toy, "--protocol", "toy", "--limit", "12",
            "--chunk-size", "4", "--grader-workers", "0", "--threads", "1", "--no-progress",
            "--out", str(out)]


def test_evaluation_split_over_two_ranks_equals_one_process(ckpt, toy, tmp_path):
    """torchrun with 2 ranks: rank r draws chunks r, r + 2 into its own file, rank 0 merges them and writes
    the summary; the samples are byte for byte one process's (chunk seeds do not depend on the rank)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ARMOR_PROGRESS": "0", "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "eval.evaluate", *_eval_args(ckpt, toy, tmp_path / "two")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # rank 0's
    assert len([ln for ln in r.stdout.splitlines() if ln.startswith("step_000007 toy_test")]) == 1
    one = E.evaluate_checkpoint(ckpt, toy, "toy", limit=12, chunk_size=4, out=tmp_path / "one", **FAST)
    d1, d2 = tmp_path / "one" / "step_000007", tmp_path / "two" / "step_000007"
    name = "toy_test__toy__k4"
    assert (d2 / f"{name}.samples.jsonl").read_bytes() == (d1 / f"{name}.samples.jsonl").read_bytes()
    two = json.loads((d2 / f"{name}.json").read_text())
    assert two["metrics"] == one[0]["metrics"] and two["stats"]["problems_generated_this_run"] == 12
    assert not list(d2.glob("*.rank*.jsonl"))               # merged, then removed


def test_stopped_split_evaluation_resumes_on_one_process(ckpt, toy, tmp_path):
    """A split evaluation stopped before rank 0 merged: chunk 0 in the samples file, chunk 1 in rank 1's file
    (its last line torn). One process takes both, draws only chunk 2, and gets one process's samples."""
    full = tmp_path / "full" / "step_000007"
    E.evaluate_checkpoint(ckpt, toy, "toy", limit=12, chunk_size=4, out=tmp_path / "full", **FAST)
    name = "toy_test__toy__k4"
    rows = _rows(full / f"{name}.samples.jsonl")
    d = tmp_path / "stopped" / "step_000007"
    d.mkdir(parents=True)
    shutil.copy(full / f".{name}.settings.json", d / f".{name}.settings.json")
    (d / f"{name}.samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["index"] < 4))
    (d / f"{name}.samples.rank1.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if 4 <= r["index"] < 8) + '{"index": 8, "sam')
    calls = []
    resumed = E.evaluate_checkpoint(ckpt, toy, "toy", limit=12, chunk_size=4, out=tmp_path / "stopped",
                                    after_chunk=lambda job, c: calls.append(c), **FAST)
    assert calls == [2]
    assert _rows(d / f"{name}.samples.jsonl") == rows and not list(d.glob("*.rank*.jsonl"))
    assert resumed[0]["metrics"] == json.loads((full / f"{name}.json").read_text())["metrics"]


# --------------------------------------------------------------------------------------------- errors
@pytest.fixture()
def no_model(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the model must not be loaded for bad input")
    monkeypatch.setattr(X, "_loaded_engine", boom)


def _err(capsys, argv) -> str:
    assert E.main(argv) == 2
    return capsys.readouterr().err


def test_bad_inputs(ckpt, toy, tmp_path, capsys, no_model):
    c = ["--checkpoint", str(ckpt), "--out", str(tmp_path / "o")]
    assert "unknown benchmark 'nope'" in _err(capsys, c + ["--benchmarks", "nope", "--protocol", "toy"])
    assert "data file not found" in _err(capsys, c + ["--benchmarks", f"x={tmp_path}/missing.jsonl"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1=?", "answer": "2"}\n{"problem": "2+2=?", "answer": \n')
    assert "line 2: invalid JSON" in _err(capsys, c + ["--benchmarks", f"bad={bad}"])
    bad.write_text('{"problem": "1+1=?", "answer": "2"}\n{"problem": "2+2=?"}\n')
    assert "row 1" in _err(capsys, c + ["--benchmarks", f"bad={bad}"])
    empty = tmp_path / "empty_ckpt"
    empty.mkdir()
    assert "has no config.json" in _err(capsys, ["--checkpoint", str(empty), "--benchmarks", toy])
    shutil.copy(ckpt / "config.json", empty / "config.json")
    assert "no model weights" in _err(capsys, ["--checkpoint", str(empty), "--benchmarks", toy])
    cut = tmp_path / "truncated_ckpt"          # a copy cut short: one line naming the file, no model loaded
    shutil.copytree(ckpt, cut)
    w = cut / "model.safetensors"
    size = w.stat().st_size
    with open(w, "r+b") as f:
        f.truncate(size // 2)
    err = _err(capsys, ["--checkpoint", str(cut), "--benchmarks", toy])
    assert err == (f"error: checkpoint: {w} has {size // 2:,} bytes, its header describes {size:,}: "
                   f"truncated or damaged, copy it again\n")
    assert "does not exist" in _err(capsys, ["--checkpoint", str(tmp_path / "nope"), "--benchmarks", toy])
    assert "samples (k) must be an integer >= 1" in _err(capsys, c + ["--benchmarks", toy, "--samples", "0"])
    assert "pass@4 needs at least 4" in _err(capsys, c + ["--benchmarks", toy, "--protocol", "toy",
                                                          "--samples", "2"])
    assert "pass@8 needs at least 8" in _err(capsys, c + ["--benchmarks", toy, "--pass-k", "8"])
    assert "unknown protocol 'fast'" in _err(capsys, c + ["--benchmarks", toy, "--protocol", "fast"])
    assert "unknown prompt template" in _err(capsys, c + ["--benchmarks", toy, "--template", "chatml"])
    assert "unknown engine" in _err(capsys, c + ["--benchmarks", toy, "--engine", "tgi"])
    run = tmp_path / "run"
    run.mkdir()
    assert "no checkpoints" in _err(capsys, ["--run", str(run), "--benchmarks", toy])
    assert "--results needs preset, arm" in _err(capsys, c + ["--benchmarks", toy, "--results",
                                                              str(tmp_path / "r.parquet")])
    assert not (tmp_path / "o").exists()

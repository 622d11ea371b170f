"""lm-eval tasks (eval/lm_eval_tasks): YAML consistency, docs/prompts/grading shared with eval.evaluate, and
the real `lm_eval` command line on the tiny model agreeing with `eval.evaluate` (greedy, same problems)."""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from common.benchmarks import build_messages, load_benchmark
from common.grading import extract_answer

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "eval" / "lm_eval_tasks"
SHIPPED = {"armor_aime24": "aime24", "armor_aime25": "aime25", "armor_amc23": "amc23", "armor_amc": "amc",
           "armor_math500": "math500", "armor_minerva_math": "minerva_math",
           "armor_olympiadbench": "olympiadbench", "armor_mmlu_pro_sample300": "mmlu_pro_sample300"}


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def _task(path: Path) -> dict:
    cfg = yaml.load(path.read_text(), Loader=_Loader)
    inc = cfg.pop("include", None)
    if inc:
        cfg = {**yaml.load((path.parent / inc).read_text(), Loader=_Loader), **cfg}
    return cfg


@pytest.fixture(scope="module")
def utils():
    spec = importlib.util.spec_from_file_location("armor_lm_eval_utils", TASK_DIR / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_task_yamls_are_consistent():
    tasks = {p.stem: _task(p) for p in TASK_DIR.glob("*.yaml")}
    assert set(tasks) == set(SHIPPED) | {"armor_toy_test"}
    for name, t in tasks.items():
        k = t["repeats"]
        dk = t["dataset_kwargs"]
        assert t["task"] == name and dk["samples"] == k
        assert dk["benchmark"] == SHIPPED.get(name, "toy_test")
        (filt,) = t["filter_list"]
        assert filt["filter"] == [{"function": "take_first_k", "k": k}], name   # keep all k responses
        metrics = [m["metric"] for m in t["metric_list"]]
        assert metrics == [f"avg@{k}"] + [f"pass@{j}" for j in dk["pass_ks"]] + [f"maj@{k}"]
        g = t["generation_kwargs"]
        assert g["until"] == [] and g["top_k"] == 0 and g["do_sample"] is True   # no "\n\n" stop, no top-k
        assert (g["temperature"], g["top_p"]) == (1.0, 0.7)
        assert t["process_results"] == "!function utils.process_results"
        assert t["custom_dataset"] == "!function utils.load_docs"
        assert (t["description"], t["doc_to_text"]) == ("armor_system", "armor_user")
    for b in ("aime24", "aime25", "amc23", "amc"):
        assert (tasks[f"armor_{b}"]["repeats"] == 32
                and tasks[f"armor_{b}"]["dataset_kwargs"]["pass_ks"] == [16])
    assert tasks["armor_mmlu_pro_sample300"]["repeats"] == 8
    toy = tasks["armor_toy_test"]
    assert toy["repeats"] == 4 and toy["generation_kwargs"]["max_gen_toks"] == 48
    assert toy["dataset_kwargs"]["default_template"] == "plain"


def test_docs_match_eval_benchmarks(utils):
    for bench in SHIPPED.values():
        data = load_benchmark(bench, "local")
        docs = utils.docs(bench, samples=4, limit=None)
        assert len(docs) == len(data)
        for p, d in zip(data[:3], docs[:3]):
            msgs = build_messages(p, data.spec.template)
            expect = [m for m in msgs if m["role"] == "system"][:1]
            assert d["armor_gold"] == p.gold and d["armor_index"] == p.index
            assert [{"role": "system", "content": d["armor_system"]}] == expect or d["armor_system"] == ""
            assert d["armor_user"] == msgs[-1]["content"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_lm_eval_loads_every_task(world, tmp_path, monkeypatch):
    """lm-eval's own TaskManager indexes the folder, builds the docs (from any working directory) and renders
    the chat messages of common.benchmarks.build_messages (system + user)."""
    from lm_eval.tasks import TaskManager, get_task_dict
    monkeypatch.setenv("ARMOR_TOY_DATA", str(world / "data" / "test.jsonl"))
    monkeypatch.chdir(tmp_path)
    tm = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    names = sorted(n for n in tm.all_tasks if n.startswith("armor_"))
    assert names == sorted(set(SHIPPED) | {"armor_toy_test"})
    for name, task in get_task_dict(names, tm).items():
        bench = SHIPPED.get(name, "toy_test")
        data = load_benchmark(bench, "local" if bench != "toy_test" else "auto")
        docs = list(task.eval_docs)
        assert len(docs) == len(data), name
        seen = []
        task.fewshot_context(docs[1], 0, apply_chat_template=True,
                             chat_template=lambda msgs, add_generation_prompt=True: seen.append(msgs) or "")
        tmpl = "plain" if bench == "toy_test" else data.spec.template
        assert seen == [build_messages(data[1], tmpl)], name


def test_toy_data_resolution(utils, world, tmp_path, monkeypatch):
    monkeypatch.delenv("ARMOR_TOY_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match="ARMOR_TOY_DATA"):      # no default layout of a world
        utils.toy_data_file()
    monkeypatch.setenv("ARMOR_TOY_DATA", str(world / "data" / "test.jsonl"))
    docs = utils.docs("toy_test", 4, [4], default_template="plain", limit=3)
    assert [d["armor_user"] for d in docs] == [p.problem for p in load_benchmark("toy_test", limit=3)]
    assert docs[0]["armor_system"] == "" and docs[0]["armor_mode"] == "boxed_or_answer_line"
    with pytest.raises(FileNotFoundError, match="ARMOR_TOY_DATA"):
        utils.docs("toy_test", 4, data_file=str(tmp_path / "none.jsonl"))


def test_process_results(utils):
    doc = {"armor_gold": "8", "armor_answer_type": "math", "armor_mode": "boxed", "armor_k": 4,
           "armor_pass_ks": [1, 2], "armor_benchmark": "t", "armor_index": 0}
    out = utils.process_results(doc, [["so \\boxed{8}", "\\boxed{3}", "8", "\\boxed{8.0}"]])
    assert out["avg@4"] == 0.5 and out["pass@1"] == 0.5 and out["maj@4"] == 1.0
    assert out["pass@2"] == pytest.approx(1 - 1 / 6)
    with pytest.raises(ValueError, match="got 1 responses, expected 4"):
        utils.process_results(doc, ["\\boxed{8}"])        # what lm-eval's default take_first filter passes


@pytest.mark.slow      # lm_eval's whole command line; every task loads in lm-eval by default (above)
def test_lm_eval_cli_matches_evaluate(world, tmp_path):
    """The real `lm_eval` CLI (hf backend, chat template, greedy) and eval.evaluate's greedy protocol give the
    same prompts, responses, extracted answers and accuracy on the same 8 problems."""
    t0 = time.time()
    lm_eval = Path(sys.executable).with_name("lm_eval")
    env = {**os.environ, "ARMOR_TOY_DATA": str(world / "data" / "test.jsonl"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "ARMOR_GRADER_WORKERS": "0"}
    out = tmp_path / "lm_eval_out"
    cmd = [str(lm_eval), "--model", "hf", "--model_args", f"pretrained={world / 'base_model'},dtype=float32",
           "--include_path", str(TASK_DIR), "--tasks", "armor_toy_test", "--limit", "8",
           "--apply_chat_template", "--gen_kwargs", "temperature=0,do_sample=False", "--device", "cpu",
           "--output_path", str(out), "--log_samples"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(Path(glob.glob(str(out / "**" / "results_*.json"), recursive=True)[0]).read_text())
    lm = res["results"]["armor_toy_test"]
    samples = [json.loads(x) for x in
               Path(glob.glob(str(out / "**" / "samples_armor_toy_test_*.jsonl"), recursive=True)[0])
               .read_text().splitlines()]

    import torch
    from eval import evaluate as E
    from common.models import load_tokenizer
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        (summ,) = E.evaluate_checkpoint(world / "base_model", f"toy_test={world / 'data' / 'test.jsonl'}",
                                        "greedy", limit=8, template="plain", max_new_tokens=48,
                                        out=tmp_path / "ours", grader_workers=0, progress=False,
                                        log=lambda *a: None)
    finally:
        torch.set_num_threads(n)
    ours = {x["index"]: x
            for x in map(json.loads, (tmp_path / "ours" / "step_000000"
                                      / "toy_test__greedy__k1.samples.jsonl").read_text().splitlines())}
    tok = load_tokenizer(str(world / "base_model"))
    problems = load_benchmark("toy_test", limit=8)
    assert len(samples) == 8
    for s in samples:
        i = s["doc"]["armor_index"]
        prompt = s["arguments"]["gen_args_0"]["arg_0"]
        assert prompt == tok.apply_chat_template(build_messages(problems[i].problem, "plain"), tokenize=False,
                                                 add_generation_prompt=True)
        (resps,) = s["filtered_resps"]
        assert len(resps) == 4 and len(set(resps)) == 1              # greedy repeats agree
        assert resps[0] == ours[i]["response"], (i, resps[0], ours[i]["response"])
        assert extract_answer(resps[0], "boxed_or_answer_line") == ours[i]["extracted"]
        assert s["avg@4"] == float(ours[i]["correct"])
    assert lm["avg@4,all_samples"] == pytest.approx(summ["metrics"]["avg@1"])
    print(f"lm-eval vs eval.evaluate: avg {lm['avg@4,all_samples']} == {summ['metrics']['avg@1']}; "
          f"{time.time() - t0:.0f}s")

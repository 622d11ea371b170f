"""lm-evaluation-harness (0.4.x) glue for the ARMOR benchmarks: the same problems, gold answers, prompts and
grader as ``python -m eval.evaluate``.

* Docs come from ``common.benchmarks.load_benchmark`` (``custom_dataset: !function utils.load_docs``; the
  YAML's ``dataset_kwargs`` name the benchmark), so gold extraction/normalization and row validation are
  common.benchmarks'. Each doc carries ``armor_system`` / ``armor_user``: the messages of
  ``common.benchmarks.build_messages(problem, template)``. The task YAML uses ``description: armor_system``
  (lm-eval turns the description into the system message under ``--apply_chat_template``) and
  ``doc_to_text: armor_user``, so with ``--apply_chat_template`` the model sees exactly
  ``tokenizer.apply_chat_template(build_messages(...), add_generation_prompt=True)``, as in eval.evaluate.
* ``process_results`` grades the k responses of a doc with ``common.grading.Grader`` (extraction mode
  ``common.benchmarks.default_mode(template)``) and returns avg@k, pass@j (unbiased estimator) and maj@k.
  The task keeps all k responses through the ``take_first_k`` filter (lm-eval's default filter keeps only
  the first of ``repeats``); a doc with a different number of responses is an error, not a silent avg@1.
* ``until: []`` (only the model's EOS stops generation; lm-eval's default would stop at the first blank
  line), ``top_k: 0`` (HF's generate otherwise applies top_k=50; eval.evaluate does not).

Options (lm-eval ``--metadata '{"template": "dapo", "data_file": "..."}'``, passed to ``load_docs``):
``template`` (prompt template, default: the benchmark's / the toy protocol's ``plain``), ``data_file`` (read
the benchmark from this file instead of the shipped copy). The tiny world's test split (task
``armor_toy_test``) is read from ``data_file``, else the ``ARMOR_TOY_DATA`` environment variable (a world is
built by the experiment driver, outside this package: the harness assumes no layout of it). Environment:
``ARMOR_GRADER_WORKERS`` (math-verify worker processes, default 1).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
try:
    import common.benchmarks  # noqa: F401
except ImportError:  # pragma: no cover - the repo is not installed in this environment
    sys.path.insert(0, str(REPO_ROOT))

from common.benchmarks import build_messages, default_mode, load_benchmark, register_jsonl  # noqa: E402
from common.metrics import maj_at_k, pass_at_k  # noqa: E402

TOY_BENCHMARKS = {"toy_test": "test", "toy_validation": "validation"}


def toy_data_file(benchmark: str = "toy_test", data_file: str | None = None) -> Path:
    """The tiny world's split file: data_file, else $ARMOR_TOY_DATA (the path of `benchmark`'s split)."""
    path = data_file or os.environ.get("ARMOR_TOY_DATA")
    if not path:
        raise FileNotFoundError(
            f"{benchmark}: no data file: set ARMOR_TOY_DATA=<world>/data/{TOY_BENCHMARKS[benchmark]}.jsonl "
            f"or pass lm-eval --metadata '{{\"data_file\": \"<path>\"}}'")
    return Path(path).expanduser()


def _system_user(messages: list[dict]) -> tuple[str, str]:
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    users = [m["content"] for m in messages if m["role"] == "user"]
    if len(users) != 1 or any(m["role"] not in ("system", "user") for m in messages):
        raise ValueError(f"unsupported message layout for lm-eval: {[m['role'] for m in messages]}")
    return system, users[0]


def docs(benchmark: str, samples: int, pass_ks=(), default_template: str | None = None,
         template: str | None = None, data_file: str | None = None, limit: int | None = None) -> list[dict]:
    """The docs of one benchmark (a list of dicts; see the module docstring)."""
    if benchmark in TOY_BENCHMARKS:
        path = toy_data_file(benchmark, data_file)
        if not path.is_file():
            raise FileNotFoundError(
                f"{benchmark}: data file not found: {path} (build the tiny world, or set "
                f"ARMOR_TOY_DATA=<path> or lm-eval --metadata '{{\"data_file\": \"<path>\"}}')")
        register_jsonl(benchmark, path)
        data = load_benchmark(benchmark, limit=limit)
    else:
        data = load_benchmark(benchmark, source=data_file or "local", limit=limit)
    tmpl = template or default_template or data.spec.template
    mode = default_mode(tmpl)
    out = []
    for p in data:
        system, user = _system_user(build_messages(p, tmpl))
        out.append({"armor_index": p.index, "armor_benchmark": data.report_name, "armor_problem": p.problem,
                    "armor_gold": p.gold, "armor_answer_type": p.answer_type, "armor_template": tmpl,
                    "armor_mode": mode, "armor_system": system, "armor_user": user, "armor_k": int(samples),
                    "armor_pass_ks": [int(j) for j in pass_ks]})
    return out


def load_docs(benchmark: str, samples: int, pass_ks=(), default_template: str | None = None,
              template: str | None = None, data_file: str | None = None, **_ignored):
    """``custom_dataset`` entry point: {"test": datasets.Dataset} (extra lm-eval metadata keys are
    ignored)."""
    import datasets
    rows = docs(benchmark, samples, pass_ks, default_template, template, data_file)
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})



def _grader(mode: str):
    from common.grading import get_grader
    workers = int(os.environ.get("ARMOR_GRADER_WORKERS", "1"))
    return get_grader(num_workers=workers, timeout_s=5.0, mode=mode)


def grade(doc: dict, responses: list[str]) -> list:
    """Verdicts (common.grading.Verdict) of the responses to one doc."""
    return _grader(doc["armor_mode"]).grade(list(responses), [doc["armor_gold"]] * len(responses),
                                            doc["armor_answer_type"])


def process_results(doc: dict, results: list) -> dict:
    """avg@k, pass@j, maj@k of one doc from its k responses (``results`` = [the filtered responses])."""
    responses = results[0] if results and isinstance(results[0], (list, tuple)) else results
    k = int(doc["armor_k"])
    if len(responses) != k:
        raise ValueError(f"{doc.get('armor_benchmark')} doc {doc.get('armor_index')}: got {len(responses)} "
                         f"responses, expected {k} (the task needs repeats: {k} and a take_first_k filter "
                         f"with k: {k})")
    verdicts = grade(doc, responses)
    correct = [bool(v.correct) for v in verdicts]
    c = sum(correct)
    out = {f"avg@{k}": c / k}
    for j in doc["armor_pass_ks"]:
        out[f"pass@{j}"] = pass_at_k(k, c, int(j))
    answers = [(v.extracted or "").strip() or None for v in verdicts]
    out[f"maj@{k}"] = maj_at_k([answers], [correct], k)
    return out

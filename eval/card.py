"""The protocol card: what an evaluation measured, in one record, on every summary (``summary["card"]``), in
the dry run of a preset and in REPRODUCTION.md: the exact prompt string of each benchmark's template, whether
the tokenizer's chat template added a system prompt (known only with the checkpoint's tokenizer: recorded by
the evaluation), the scorer(s), the answer mode, sampling, k, the pass@j estimators, and each benchmark
file's rows and sha256.

    unit_card(unit) -> dict;  card_with_tokenizer(unit, tokenizer) -> dict (+ the rendered first prompt)
    protocol_card(protocol, benchmarks, max_new_tokens) -> dict;  card_markdown(card) -> str
"""
from __future__ import annotations

from pathlib import Path

from common.benchmarks import ALIASES, TEMPLATES, default_mode, get_spec
from common.hashing import sha256_file
from eval.settings import EvalSettings
from eval.protocols import resolve_setting
from eval.units import bench_inputs

__all__ = ["ESTIMATORS", "SCORER_TEXT", "prompt_text", "unit_card", "card_with_tokenizer", "protocol_card",
           "card_markdown"]

#: what each reported metric name means (the card's estimator lines)
ESTIMATORS = {
    "avg": "avg@k: mean correctness over all k samples of all problems",
    "pass": "pass@j: the unbiased estimator 1 - C(n-c, j)/C(n, j) per problem, averaged (Chen et al. 2021)",
    "best": "best@j: verl's bootstrap best@j/mean (1000 draws of j of the k samples with replacement, numpy "
            "seed 42 per problem; estimates 1 - (1 - c/n)^j, below pass@j when 0 < c < n)",
    "maj": "maj@k: majority vote over the k extracted answers",
}
SCORER_TEXT = {
    "math_verify": "math_verify: the answer mode's final answer compared with the gold by math-verify",
    "math_dapo": "math_dapo (the authors' reward/validation scorer): last 'Answer:' line of the last 300 "
                 "characters, Minerva-normalised, string equality, +1/-1, no boxed fallback",
}


def prompt_text(template: str) -> list[dict]:
    """The template's chat messages with the problem written as ``{problem}`` (the exact strings sent)."""
    return TEMPLATES[template]("{problem}")


def _file_of(data) -> dict:
    spec = getattr(data, "spec", None)
    path = spec.local_path() if spec is not None else None
    rec = {"rows": len(data), "source": str(data.source)}
    p = Path(str(data.source))
    p = p if p.is_file() else path
    if p is not None and Path(p).is_file():
        rec.update(file=Path(p).name, sha256=sha256_file(p))
    return rec


def _bench_card(name: str, data, template: str, mode: str, scorers, samples: int, pass_ks) -> dict:
    return {"benchmark": name, "template": template, "prompt": prompt_text(template), "answer_mode": mode,
            "scorers": list(scorers), "samples": samples, "pass_ks": list(pass_ks), **_file_of(data)}


def _card(protocol: dict, benches: list[dict], max_new_tokens, best_of: bool) -> dict:
    kinds = ["avg", "pass"] + (["best"] if best_of else []) + ["maj"]
    return {"protocol": protocol, "max_new_tokens": max_new_tokens, "benchmarks": benches,
            "estimators": {k: ESTIMATORS[k] for k in kinds},
            "system_prompt": "recorded with the checkpoint's tokenizer on every evaluation summary (a chat "
                             "template may add its own when the prompt has none: Qwen2.5-Math's does)"}


def unit_card(unit) -> dict:
    """The card of one evaluation unit (eval.units.Unit), from its recorded settings."""
    s = unit.settings
    proto = {"name": s["protocol"], "temperature": s["temperature"], "top_p": s["top_p"]}
    bench = _bench_card(unit.plan.name, unit.plan.data, s["template"], s["answer_mode"],
                        s.get("scorers", ["math_verify"]), s["samples"], s["pass_ks"])
    return _card(proto, [bench], s["max_new_tokens"], bool(s.get("best_of")))


def card_with_tokenizer(unit, tokenizer) -> dict:
    """``unit_card`` plus the first problem's prompt as the tokenizer renders it and whether its chat
    template added a system message the template did not send."""
    from common.benchmarks import build_messages
    card = unit_card(unit)
    first = next(iter(unit.plan.data), None)
    if first is None or not hasattr(tokenizer, "apply_chat_template"):
        return card
    msgs = build_messages(first.problem, unit.plan.template)
    try:
        rendered = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    except Exception as e:  # a tokenizer without a chat template: say so rather than fail the evaluation
        card["system_prompt"] = f"not rendered: {type(e).__name__}: {e}"
        return card
    sent = any(m["role"] == "system" for m in msgs)
    added = not sent and "system" in rendered.split(first.problem[:40] or "\0")[0]
    card["system_prompt"] = ("sent by the template" if sent else
                             "added by the tokenizer's chat template" if added else "none")
    card["rendered_first_prompt"] = rendered
    return card


def _planned(name: str, p, s: EvalSettings) -> dict:
    """A benchmark's card entry from its registry spec, without loading it (a hub benchmark is fetched by the
    run; its rows and hash are on the evaluation's own card)."""
    spec = get_spec(ALIASES.get(name, name))
    math = spec.answer_type == "math"
    tmpl = s.template or p.template or (p.math_template if math else None) or spec.template
    setting = resolve_setting(p, name, s.samples, s.pass_ks, aliases=(spec.name,))
    rec = {"benchmark": name, "template": tmpl, "prompt": prompt_text(tmpl),
           "answer_mode": default_mode(tmpl),
           "scorers": list(s.scorers or p.scorers) if math else ["math_verify"], "samples": setting.samples,
           "pass_ks": list(setting.pass_ks)}
    path = spec.local_path()
    if path is not None and path.is_file():
        rec.update(rows=sum(1 for line in path.open(encoding="utf-8") if line.strip()), source="local",
                   file=path.name, sha256=sha256_file(path))
    else:
        rec.update(rows="hub", source=f"hub ({spec.hf_id or '?'}), fetched by the run")
    return rec


def protocol_card(protocol, benchmarks, max_new_tokens, scorers=None) -> dict:
    """The card of an evaluation not yet run (a preset's dry run): ``protocol`` a Protocol or name,
    ``benchmarks`` registry names (NAME=path: the file's rows and hash)."""
    s = EvalSettings(benchmarks=benchmarks, protocol=protocol, scorers=scorers)
    p = s.protocol
    benches = []
    for b in s.benchmarks:
        name, sep, _ = b.partition("=")
        benches.append(_planned(name.strip(), p, s) if not sep else
                       [_bench_card(x.name, x.data, x.template, x.mode, x.scorers, x.setting.samples,
                                    x.setting.pass_ks)
                        for x in bench_inputs(EvalSettings(benchmarks=b, protocol=p, scorers=scorers))][0])
    return _card({"name": p.name, "temperature": p.temperature, "top_p": p.top_p}, benches, max_new_tokens,
                 p.best_of)


def card_markdown(card: dict) -> str:
    """The card as Markdown (the dry run prints it; REPRODUCTION.md holds it)."""
    p = card["protocol"]
    out = [f"Protocol `{p['name']}`: temperature {p['temperature']}, top_p {p['top_p']}, "
           f"max_new_tokens {card['max_new_tokens']}.", ""]
    prompts: dict[str, list[dict]] = {}
    out.append("| benchmark | rows | file sha256 | template | scorers (primary first) | k | pass@j |")
    out.append("|---|---|---|---|---|---|---|")
    for b in card["benchmarks"]:
        prompts.setdefault(b["template"], b["prompt"])
        sha = (b.get("sha256") or "—")[:16]
        ks = ", ".join(map(str, b["pass_ks"])) or "—"
        out.append(f"| {b['benchmark']} | {b['rows']} | `{sha}` | {b['template']} ({b['answer_mode']}) | "
                   f"{', '.join(b['scorers'])} | {b['samples']} | {ks} |")
    out.append("")
    for t, msgs in prompts.items():
        out.append(f"Template `{t}` (exact messages; `{{problem}}` is the problem text):")
        out += ["", "```"] + [f"[{m['role']}] {m['content']}" for m in msgs] + ["```", ""]
    if any(b["template"] == "mc" for b in card["benchmarks"]):
        out.append("Multiple choice (template mc): the authors' code has no protocol for these benchmarks; "
                   "graded by the option letter under either scorer.")
        out.append("")
    out.append(f"System prompt: {card['system_prompt']}.")
    scorers = sorted({s for b in card["benchmarks"] for s in b["scorers"]})
    out += ["", "Scorers:"] + [f"- {SCORER_TEXT.get(s, s)}" for s in scorers]
    out += ["", "Estimators:"] + [f"- {v}" for v in card["estimators"].values()]
    return "\n".join(out) + "\n"

"""Generate k samples per problem with a rollout engine and grade them: shared by the trainer's
in-loop validation and `eval.evaluate`, so both report the same numbers for the same samples."""
from __future__ import annotations

from dataclasses import dataclass

from common.rollout.base import RolloutEngine, SamplingParams


def encode_prompt(tokenizer, problem: str, template: str) -> list[int]:
    """Token ids of the chat-formatted prompt (the template is part of the recorded protocol)."""
    from common.benchmarks import build_messages
    return list(tokenizer.apply_chat_template(build_messages(problem, template), add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


@dataclass
class SampleRecord:
    index: int            # problem's row in its benchmark
    sample: int           # 0..k-1
    response: str
    extracted: str | None
    correct: bool
    reason: str
    length: int           # response tokens
    finished: bool        # stopped at EOS (not cut at the length limit)

    def to_json(self) -> dict:
        return self.__dict__.copy()


def sample_and_grade(engine: RolloutEngine, tokenizer, problems, template: str, params: SamplingParams,
                     grader, prompt_ids: list[list[int]] | None = None) -> list[SampleRecord]:
    """problems: objects with .index, .problem, .gold, .answer_type (common.benchmarks.Problem).

    Returns one record per (problem, sample), problem-major, samples in order."""
    if not problems:
        return []
    if prompt_ids is None:
        prompt_ids = [encode_prompt(tokenizer, p.problem, template) for p in problems]
    ro = engine.generate(prompt_ids, params)
    golds = [problems[i].gold for i in ro.prompt_index]
    types = [problems[i].answer_type for i in ro.prompt_index]
    verdicts = grader.grade(ro.texts, golds, types)
    records, seen = [], {}
    for j, (i, v) in enumerate(zip(ro.prompt_index, verdicts)):
        s = seen.get(i, 0)
        seen[i] = s + 1
        records.append(SampleRecord(problems[i].index, s, ro.texts[j], v.extracted, bool(v.correct), v.reason,
                                    len(ro.response_ids[j]), ro.finished[j]))
    return records

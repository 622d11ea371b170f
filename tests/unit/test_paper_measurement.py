"""The same responses through the RL reward, in-run validation and the final evaluation: the paper presets
give the authors' verdicts (math_dapo: an ``Answer:`` line +1, a boxed-only answer -1, in all three), the
final evaluation also reports math_verify beside; the tiny world keeps its own template and grader."""
from __future__ import annotations

import pytest
import torch

from armor.rewards import outcome_reward
from common.grading import Grader
from eval.protocols import get_protocol
from eval.settings import EvalSettings
from eval.units import bench_inputs
from reproduce.matrix.presets import load_preset

GOLD = "540"
RESPONSES = ["Let me work it out.\nAnswer: 540",                          # the DAPO format: +1
             "Let me work it out, so the answer is \\boxed{540}.",        # boxed only: -1 for the authors
             "Answer: 540\n" + "and then I keep checking. " * 20,         # line outside the last 300 chars
             "Answer: 541"]
AUTHORS = [1.0, -1.0, -1.0, -1.0]


def _trainer_grader(cfg) -> Grader:
    """The one Grader the trainer builds for its reward and its validation (armor/trainer.py)."""
    return Grader(num_workers=0, timeout_s=cfg.reward.grader_timeout_s, mode=cfg.reward.answer_mode,
                  scorer=cfg.reward.scorer)


@pytest.mark.parametrize("preset", ["qwen25-math-7b", "qwen3-8b-base"])
def test_paper_presets_measure_as_the_authors(preset):
    p = load_preset(preset)
    assert p.cfg.data.prompt_template == "dapo" and p.cfg.reward.scorer == "math_dapo"
    with _trainer_grader(p.cfg) as g:
        verdicts = g.grade(RESPONSES, [GOLD] * len(RESPONSES))
    reward = outcome_reward(torch.tensor([v.correct for v in verdicts]))
    assert reward.tolist() == AUTHORS                                      # reward and validation: one grader
    # the final evaluation: the DAPO prompt, math_dapo primary, math_verify beside, from the same responses
    s = EvalSettings(benchmarks=["amc23", "aime24"], protocol=p.protocol.eval_protocol)
    for bi in bench_inputs(s):
        assert (bi.template, bi.scorers) == ("dapo", ("math_dapo", "math_verify"))
        with Grader(num_workers=0, mode=bi.mode, scorer=bi.scorers[0]) as g:
            assert [1.0 if v.correct else -1.0 for v in g.grade(RESPONSES, [GOLD] * 4)] == AUTHORS
        with Grader(num_workers=0, mode=bi.mode, scorer=bi.scorers[1]) as g:
            # math-verify on the answer line: the cut line is read too; the boxed-only answer is not
            assert [v.correct for v in g.grade(RESPONSES, [GOLD] * 4)] == [True, False, True, False]
    assert list(p.protocol.eval_benchmarks[:4]) == ["aime24", "aime25", "amc23", "amc"]


def test_tiny_world_keeps_its_template_and_grader():
    p = load_preset("tiny")
    assert p.cfg.reward.scorer == "math_verify" and p.cfg.data.prompt_template == "plain"
    toy = get_protocol(p.protocol.eval_protocol)
    assert (toy.template, toy.scorers, toy.best_of, toy.math_template) == \
        ("plain", ("math_verify",), False, None)
    assert p.cfg.reward.answer_mode == "boxed"
    with _trainer_grader(p.cfg) as g:                  # the world's grader (math-verify on the last box)
        assert [v.correct for v in g.grade(RESPONSES, [GOLD] * 4)] == [False, True, False, False]


def test_math_dapo_needs_the_answer_line_mode():
    from armor.config import ConfigError, load_config
    base = ["model.path=m", "data.train=t.jsonl", "schedule.validate_every=0"]
    with pytest.raises(ConfigError, match="reward.answer_mode.*boxed.*answer_line"):
        load_config(None, base + ["reward.scorer=math_dapo"])
    cfg = load_config(None, base + ["reward.scorer=math_dapo", "reward.answer_mode=answer_line"])
    assert cfg.reward.scorer == "math_dapo"

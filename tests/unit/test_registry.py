"""Variants registered by name with their needs (common.registry, armor.registry): the config's choices are
the registries' names, validation refuses what is not registered or whose needs the config does not meet, a
new ratio variant is one registered function (it is then a valid `algo.mix.variant`, dispatched, and its needs
read), and so is a new answer mode (common.grading.ANSWER_MODES: a valid `reward.answer_mode` and Grader
mode)."""
import pytest
import torch

import common.registry
from armor.advantages import ADVANTAGES, group_advantages
from armor.anchors import ANCHOR_FILTERS
from armor.config import ConfigError, RunConfig, _registered_choices, load_config
from armor.objectives import KL_ESTIMATORS, LOSS_AGGREGATIONS, RATIOS, ratio_and_clip_range
from armor.registry import NEEDS, Entry, Registry
from common.benchmarks import TEMPLATE_MODES
from common.grading import ANSWER_MODES, MODES, SCORERS, Grader, extract_answer, grade_one

BASE = ["model.path=m", "data.train=t.jsonl", "schedule.validate_every=0"]


def test_every_registered_choice_of_the_config_names_its_registry():
    found = {key: reg for key, _, reg in _registered_choices(RunConfig())}
    assert found == {"algo.advantage": ADVANTAGES, "algo.loss_agg": LOSS_AGGREGATIONS,
                     "algo.kl.estimator": KL_ESTIMATORS, "algo.mix.variant": RATIOS,
                     "reward.answer_mode": ANSWER_MODES, "algo.anchor.filter": ANCHOR_FILTERS,
                     "reward.scorer": SCORERS}
    assert ANSWER_MODES.names() == MODES == ("boxed", "answer_line", "boxed_or_answer_line")
    assert set(TEMPLATE_MODES.values()) <= set(ANSWER_MODES.names())   # every template's mode is registered
    assert RATIOS.names() == ("plain", "mixed", "static_clip", "offpolicy_anchor")
    assert ADVANTAGES.names() == ("grpo", "grpo_no_std", "qae")
    assert ANCHOR_FILTERS.names() == ("none", "exclude_modes") and ANCHOR_FILTERS["none"].needs == set()
    assert KL_ESTIMATORS.names() == ("k1", "k2", "k3") and "low_var_kl" in KL_ESTIMATORS   # verl's alias
    assert {n for n in RATIOS.names() if "reference" in RATIOS[n].needs} == {"mixed", "offpolicy_anchor"}


@pytest.mark.parametrize("key", ["algo.mix.variant", "algo.advantage", "algo.loss_agg", "algo.kl.estimator",
                                 "reward.answer_mode", "algo.anchor.filter", "reward.scorer"])
def test_an_unregistered_choice_is_refused_naming_key_and_value(key):
    with pytest.raises(ConfigError, match=f"{key}.*nope.*registered"):
        load_config(None, BASE + [f"{key}=nope"])


def test_a_new_answer_mode_is_one_registered_function(monkeypatch):
    monkeypatch.setattr(ANSWER_MODES, "_entries", dict(ANSWER_MODES._entries))   # as it was, after the test
    with pytest.raises(ConfigError, match="reward.answer_mode: 'last_line' is not a registered answer mode "
                                          r"\(registered: boxed, answer_line, boxed_or_answer_line\)"):
        load_config(None, BASE + ["reward.answer_mode=last_line"])
    with pytest.raises(ValueError, match="unknown extraction mode 'last_line'"):
        Grader(num_workers=0, mode="last_line")

    @ANSWER_MODES.register("last_line")
    def _last_line(text):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()] if isinstance(text, str) else []
        return lines[-1] if lines else None

    assert load_config(None, BASE + ["reward.answer_mode=last_line"]).reward.answer_mode == "last_line"
    assert extract_answer("work\n 42 \n", "last_line") == "42"
    with Grader(num_workers=0, mode="last_line") as g:
        assert ([v.correct for v in g.grade(["so\n42", "so\n41", ""], ["42", "42", "42"])]
                == [True, False, False])
    assert grade_one("so\n\\frac{1}{2}", "0.5", mode="last_line").correct
    assert (ANSWER_MODES.names()[-1] == "last_line"
            and MODES == ("boxed", "answer_line", "boxed_or_answer_line"))


def test_a_new_ratio_variant_is_one_registered_function(monkeypatch):
    # the registry as it was, after the test
    monkeypatch.setattr(RATIOS, "_entries", dict(RATIOS._entries))

    @RATIOS.register("half_plain", needs={"anchors"})
    def _half(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp):
        return 0.5 * torch.exp(logp - old_logp), eps_low, eps_high

    base = ["model.path=m", "data.train=t.jsonl", "schedule.validate_every=0", "algo.mix.variant=half_plain"]
    with pytest.raises(ConfigError, match="algo.mix.variant.*half_plain.*algo.anchor.enabled"):
        load_config(None, base)                     # its declared need is checked at load
    assert load_config(None, base + ["algo.anchor.enabled=true"]).algo.mix.variant == "half_plain"
    r, _, _ = ratio_and_clip_range("half_plain", torch.zeros(1, 2), torch.zeros(1, 2))
    assert torch.equal(r, torch.full((1, 2), 0.5))


def test_the_generic_registry_lives_in_common_and_armor_adds_the_needs():
    assert issubclass(Registry, common.registry.Registry) and Entry is common.registry.Entry
    assert Registry.vocabulary == NEEDS == {"reference", "anchors", "teacher", "modes"}
    assert type(ANSWER_MODES) is common.registry.Registry
    with pytest.raises(ValueError, match="unknown needs"):      # common's registries declare no needs
        common.registry.Registry("thing", "x.y").register("a", needs={"reference"})


def test_registry_refuses_unknown_needs_and_duplicates():
    reg = Registry("thing", "x.y")
    reg.register("a", needs={"reference"})(lambda: 1)
    assert reg["a"] == Entry("a", reg["a"].fn, frozenset({"reference"}))
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(lambda: 2)
    with pytest.raises(ValueError, match="unknown needs"):
        reg.register("b", needs={"gpu"})
    with pytest.raises(ValueError, match="x.y: unknown thing 'c'"):
        reg["c"]


def test_advantage_dispatch_is_the_estimators():
    r = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    torch.testing.assert_close(group_advantages(r, "grpo_no_std", k=0.3),
                               torch.tensor([[1.0, -1.0, -1.0, 1.0]]))
    assert group_advantages(r, "qae", k=0.45).shape == (1, 4)

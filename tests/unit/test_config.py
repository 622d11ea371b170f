"""Run config: presets carry the paper's numbers; overrides apply; every bad input names its key."""
from pathlib import Path

import pytest

from armor.config import (FOREIGN_SECTIONS, ConfigError, apply_overrides, dump_config, load_config, read_yaml,
                          to_dict)

PRESETS = Path(__file__).resolve().parents[2] / "reproduce" / "presets"
P7B = PRESETS / "qwen25-math-7b.yaml"


def test_qwen25_math_7b_preset_carries_appendix_b():
    c = load_config(P7B)
    assert c.model.path == "Qwen/Qwen2.5-Math-7B"
    assert (c.batch.prompts_per_step, c.batch.group_size, c.batch.mini_batch_prompts) == (512, 16, 32)
    assert c.batch.updates_per_step == 16
    assert (c.optim.lr, c.optim.warmup_steps, c.optim.weight_decay, c.optim.grad_clip) == (1e-6, 10, 0.1, 1.0)
    assert (c.algo.clip.eps_low, c.algo.clip.eps_high, c.algo.clip.dual_clip_c) == (0.2, 0.28, 10.0)
    assert (c.lengths.max_prompt, c.lengths.max_response, c.lengths.overlong_buffer) == (2048, 8192, 4096)
    assert (c.rollout.temperature, c.rollout.top_p) == (1.0, 1.0)
    assert (c.rollout.gen_batch_prompts, c.rollout.max_rounds) == (4 * 512, 10)
    assert (c.validation.benchmarks, c.validation.temperature, c.validation.top_p) == (["aime24"], 1.0, 0.7)
    # its protocol: tests/integration/test_experiments.py (reproduce/matrix/protocol.py)
    assert c.schedule.validate_every == 5


def test_qwen3_preset_inherits_and_overrides():
    c = load_config(PRESETS / "qwen3-8b-base.yaml")
    assert c.model.path == "Qwen/Qwen3-8B-Base"
    assert c.lengths.max_response == 20480 and c.lengths.max_response - c.lengths.overlong_buffer == 16384
    assert c.rollout.gen_batch_prompts == 3 * 512
    assert c.optim.lr == 1e-6 and c.batch.group_size == 16   # inherited


def test_dotted_overrides_are_typed():
    c = load_config(P7B, ["algo.mix.alpha=0.875", "algo.mix.variant=mixed", "algo.anchor.enabled=true",
                          "schedule.keep_steps=[10,20]", "algo.clip.dual_clip_c=null", "optim.lr=3e-5"])
    assert c.algo.mix.alpha == 0.875 and c.algo.mix.variant == "mixed" and c.algo.anchor.enabled is True
    assert c.schedule.keep_steps == [10, 20] and c.algo.clip.dual_clip_c is None and c.optim.lr == 3e-5


def test_the_anchor_filter_is_a_dotted_key_recorded_in_config_yaml(tmp_path):
    """algo.anchor.filter: none by default (the paper's rule); the oracle by dotted overrides, written to and
    read back from the run's config.yaml."""
    from armor.config import dump_config
    assert load_config(P7B).algo.anchor.filter == "none" and load_config(P7B).algo.anchor.exclude_modes == []
    c = load_config(P7B, ["algo.anchor.enabled=true", "algo.anchor.filter=exclude_modes",
                          "algo.anchor.exclude_modes=[shortcut]", f"logging.answer_modes={TOY_MODES}"])
    assert c.algo.anchor.filter == "exclude_modes" and c.algo.anchor.exclude_modes == ["shortcut"]
    dump_config(c, tmp_path / "config.yaml")
    back = load_config(tmp_path / "config.yaml").algo.anchor
    assert (back.filter, back.exclude_modes) == ("exclude_modes", ["shortcut"])


def test_base_chain_merges_deeply(tmp_path):
    (tmp_path / "a.yaml").write_text("model: {path: m, dtype: bfloat16}\ndata: {train: t.jsonl}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nmodel: {path: other}\n")
    d = read_yaml(tmp_path / "b.yaml")
    assert d["model"] == {"path": "other", "dtype": "bfloat16"}


TOY_MODES = "reproduce.toy.task:classify"    # the toy world's mode classifier
BAD = [
    ("algo.mix.alpha=1.5", "algo.mix.alpha"),
    ("algo.mix.alpha=0", "algo.mix.alpha"),
    ("algo.clip.eps_low=-0.1", "algo.clip.eps_low"),
    ("algo.clip.eps_high=-1", "algo.clip.eps_high"),
    ("batch.group_size=1", "batch.group_size"),
    ("batch.mini_batch_prompts=30", "batch.mini_batch_prompts"),
    ("batch.prompts_per_step=0", "batch.prompts_per_step"),
    ("algo.anchor.enabled=true algo.anchor.ref_n=0", "algo.anchor.ref_n"),
    ("algo.kl.coef=-1", "algo.kl.coef"),
    ("algo.kl.estimator=k4", "algo.kl.estimator"),
    ("algo.advantage=ppo", "algo.advantage"),
    ("algo.loss_agg=mean", "algo.loss_agg"),
    ("algo.mx.alpha=0.9", "algo.mx"),
    ("optim.lr=0", "optim.lr"),
    ("optim.lr=fast", "optim.lr"),
    ("optim.betas=[0.9]", "optim.betas"),
    ("rollout.top_p=1.5", "rollout.top_p"),
    ("rollout.temperature=0", "rollout.temperature"),
    ("rollout.engine=sglang", "rollout.engine"),
    ("lengths.overlong_buffer=9000", "lengths.overlong_buffer"),
    ("schedule.total_steps=0", "schedule.total_steps"),
    ("schedule.save_every=2.5", "schedule.save_every"),
    ("validation.samples=0", "validation.samples"),
    ("algo.reference.reset.every=0", "algo.reference.reset.every"),
    ("algo.reference.reset.until_step=10", "algo.reference.reset.until_step"),
    ("algo.mix.variant=offpolicy_anchor", "algo.mix.variant"),
    ("algo.anchor.enabled=yes_please", "algo.anchor.enabled"),
    ("algo.anchor.filter=oracle", "algo.anchor.filter"),
    ("algo.anchor.filter=exclude_modes algo.anchor.exclude_modes=[shortcut]", "algo.anchor.filter"),
    ("algo.anchor.enabled=true algo.anchor.filter=exclude_modes algo.anchor.exclude_modes=[shortcut]",
     "algo.anchor.filter"),                             # no mode classifier (logging.answer_modes)
    ("algo.anchor.exclude_modes=[shortcut]", "algo.anchor.exclude_modes"),      # filter none reads none
    (f"algo.anchor.enabled=true algo.anchor.filter=exclude_modes logging.answer_modes={TOY_MODES}",
     "algo.anchor.exclude_modes"),
    (f"algo.anchor.enabled=true algo.anchor.filter=exclude_modes logging.answer_modes={TOY_MODES} "
     "algo.anchor.exclude_modes=[shortcut,last]", "algo.anchor.exclude_modes[1]"),
    ("model.path=", "model.path"),
    ("data.train=", "data.train"),
    ("algo.clip.dual_clip_c=0.5", "algo.clip.dual_clip_c"),
    ("algo.qae_k=1.2", "algo.qae_k"),
    ("protocl.armor_alpha=0.5", "protocl"),
    ("logging.backends=[jsonl,mlflow]", "logging.backends[1]"),
    ("logging.backends=[tensorboard,tensorboard]", "logging.backends"),
    ("logging.wandb_mode=cloud", "logging.wandb_mode"),
    ("nonsense", "override"),
    ("algo.rollout_correction.mode=is", "algo.rollout_correction.mode"),
    ("algo.rollout_correction.mode=tis", "algo.rollout_correction.threshold"),
    ("algo.rollout_correction.mode=tis algo.rollout_correction.threshold=1",
     "algo.rollout_correction.threshold"),
    ("algo.rollout_correction.threshold=2", "algo.rollout_correction.threshold"),
    ("algo.rollout_correction.mode=tis algo.rollout_correction.threshold=2 "
     "algo.rollout_correction.threshold_lower=0.5", "algo.rollout_correction.threshold_lower"),
    ("algo.rollout_correction.mode=mis algo.rollout_correction.threshold=2 "
     "algo.rollout_correction.threshold_lower=1", "algo.rollout_correction.threshold_lower"),
    ("algo.rollout_correction.level=sequence", "algo.rollout_correction.level"),
    ("compute.fast=fastest", "compute.fast"),
    ("compute.fast=native", "compute.fast"),                    # the 7B preset runs on cuda
    ("device=cpu rollout.engine=hf parallel.compute_dtype=float32 model.dtype=bfloat16 compute.fast=native",
     "compute.fast"),
    ("device=cpu compute.fast=native", "compute.fast"),         # its vllm engine: no kernel there
    ("algo.rollout_correction.mode=mis algo.rollout_correction.threshold=2 "
     "algo.rollout_correction.level=response", "algo.rollout_correction.level"),
]


@pytest.mark.parametrize("override,key", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_config(P7B, override.split(" "))
    assert key in str(e.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "t.yaml").write_text("model: {path: m}\ndata: {train: t}\nbatch: 5\n")
    with pytest.raises(ConfigError, match="batch: expected a mapping"):
        load_config(tmp_path / "t.yaml")


def test_override_creates_nested_and_values_are_yaml():
    d = apply_overrides({}, ["a.b.c=1", "a.b.d=[1, 2]", "x=hello"])
    assert d == {"a": {"b": {"c": 1, "d": [1, 2]}}, "x": "hello"}


def test_logging_backends_accept_a_list_or_comma_text():
    assert (load_config(P7B, ["logging.backends=jsonl,tensorboard"]).logging.backends
            == ["jsonl", "tensorboard"])
    assert load_config(P7B, ["logging.backends=[wandb]"]).logging.backends == ["wandb"]
    with pytest.raises(ConfigError, match=r"logging.backends: \['tensorboard', 'tensorboard'\] names"):
        load_config(P7B, ["logging.backends=tensorboard,tensorboard"])


def test_the_trainer_keeps_other_tools_sections_unread_and_writes_them_back(tmp_path):
    """`protocol:` is the experiment driver's (reproduce/matrix/protocol.py): the trainer accepts a preset
    that has one, does not validate it, and copies it into the run's config.yaml (eval.evaluate --run reads it
    there)."""
    assert set(FOREIGN_SECTIONS) == {"protocol"}
    c = load_config(P7B, ["protocol.armor_alpha=2", "protocol.not_a_key=1"])   # not the trainer's to check
    assert not hasattr(c, "protocol")
    proto = c.foreign["protocol"]
    # `base:` merged
    assert proto["armor_alpha"] == 2 and proto["not_a_key"] == 1 and proto["peak_step"] == 140
    assert to_dict(c)["protocol"] == proto and list(to_dict(c))[-1] == "protocol"
    dump_config(c, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert read_yaml(tmp_path / "config.yaml")["protocol"]["eval_benchmarks"] == proto["eval_benchmarks"]
    assert again.foreign == c.foreign and again.algo == c.algo
    (tmp_path / "bare.yaml").write_text("model: {path: m}\ndata: {train: t.jsonl}\nschedule: "
                                        "{validate_every: 0}\n")
    bare = load_config(tmp_path / "bare.yaml")
    assert bare.foreign == {} and "protocol" not in to_dict(bare)
    # a typo in a trainer section, or in a section name, is still an error naming the key
    with pytest.raises(ConfigError,
                       match=r"^protocl: unknown key \(known: .*; sections of other tools: protocol\)"):
        load_config(P7B, ["protocl.armor_alpha=0.5"])
    with pytest.raises(ConfigError, match=r"^algo.mix.alfa: unknown key"):
        load_config(P7B, ["algo.mix.alfa=0.5"])
    with pytest.raises(ConfigError, match=r"^foreign: unknown key"):    # the field is not a key of the file
        load_config(P7B, ["foreign.protocol.seeds=[1]"])
    # a run folder's config.yaml written before compute.fast: the retired key names what replaced it
    old = (tmp_path / "bare.yaml").read_text().replace("data:", "rollout: {static_kv_cache: true}\ndata:")
    (tmp_path / "old.yaml").write_text(old)
    with pytest.raises(ConfigError, match=r"^rollout.static_kv_cache: retired, replaced by compute.fast \("):
        load_config(tmp_path / "old.yaml")


def test_rollout_correction_is_off_in_the_paper_presets_and_validated_naming_key_and_value():
    for preset in ("qwen25-math-7b", "qwen3-8b-base", "tiny", "smoke"):
        rc = load_config(PRESETS / f"{preset}.yaml").algo.rollout_correction
        assert (rc.mode, rc.threshold, rc.threshold_lower, rc.level) == ("none", None, None, "token"), preset
    rc = load_config(P7B, ["algo.rollout_correction.mode=mis", "algo.rollout_correction.threshold=2",
                           "algo.rollout_correction.threshold_lower=0",
                           "algo.rollout_correction.level=sequence"]).algo.rollout_correction
    assert (rc.mode, rc.threshold, rc.threshold_lower, rc.level) == ("mis", 2.0, 0.0, "sequence")
    with pytest.raises(ConfigError, match=r"algo.rollout_correction.threshold: 0.5 must be > 1"):
        load_config(P7B, ["algo.rollout_correction.mode=tis", "algo.rollout_correction.threshold=0.5"])
    with pytest.raises(ConfigError, match=r"algo.rollout_correction.threshold: None is required by "
                                          r"algo.rollout_correction.mode=mis"):
        load_config(P7B, ["algo.rollout_correction.mode=mis"])
    with pytest.raises(ConfigError, match=r"algo.rollout_correction.threshold_lower: 0.5 applies to "
                                          r"algo.rollout_correction.mode=mis only \(it is tis\)"):
        load_config(P7B, ["algo.rollout_correction.mode=tis", "algo.rollout_correction.threshold=2",
                          "algo.rollout_correction.threshold_lower=0.5"])


def test_compute_fast_is_recorded_and_the_tiny_presets_opt_into_the_kernel(tmp_path):
    """compute.fast: auto by default, written into the run's config.yaml; the tiny presets (and their
    probes) ask for `native` (the main job's time budget), smoke and the paper presets keep the default."""
    cfg = load_config(PRESETS / "smoke.yaml", ["model.path=m", "data.train=t.jsonl"])
    assert cfg.compute.fast == "auto" and to_dict(cfg)["compute"] == {"fast": "auto"}
    dump_config(cfg, tmp_path / "config.yaml")
    assert read_yaml(tmp_path / "config.yaml")["compute"]["fast"] == "auto"
    assert load_config(tmp_path / "config.yaml", ["compute.fast=off"]).compute.fast == "off"
    for name in ("tiny", "tiny-paper", "tiny-paper-confirm", "tiny-slow", "tiny-v2"):
        assert load_config(PRESETS / f"{name}.yaml").compute.fast == "native", name
    assert load_config(P7B).compute.fast == "auto"

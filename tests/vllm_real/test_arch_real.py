"""The paper models' layouts through the real vLLM CPU build: toy-width Qwen2 (Qwen2.5-Math-7B's layout) and
Qwen3 (Qwen3-8B-Base's) with an untied lm_head, GQA (4 query heads, 2 kv heads of width 32), a vocabulary
padded above the tokenizer's (128 rows for 103 tokens) and, for Qwen3, per-head q/k RMSNorm and an explicit
head_dim (32, twice hidden / heads). armor.train runs the ARMOR arm with the engine's log-probs equal to the
trainer's after every push: Qwen2 on 1 rank (the 7B preset's TP 1), Qwen3 on 2 ranks as one tensor-parallel
engine (rollout.tensor_parallel_size=2, the 8B preset's: vLLM's external_launcher under torchrun, gloo); the
other pairings, and 2 gloo ranks with an engine each, under -m slow. A TP-2 push that misses Qwen3's q/k norms
stops the run; eval.evaluate's greedy samples through vLLM equal the HF engine's (Qwen3; Qwen2 under -m slow).
"""
import json
import shutil
import sys

import pytest
import torch
from tier_runs import TWO_RANKS, armor_args, check_run, evaluate, run, sample_rows

FAMILIES = ["qwen2", "qwen3"]
MODEL_TYPES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
LAYOUTS = {"one": ([], 1), "two": (TWO_RANKS, 1), "tp2": (TWO_RANKS, 2)}   # launcher, TP size
# each engine layout once in the default tier, each family once: qwen2 on "one", qwen3 on "tp2" (their
# presets'). Behind -m slow: "two" (2 ranks, an engine each): each engine's push is the one-rank push, the
# FSDP2 gather of the paper layouts runs on 2 ranks in "tp2", two engines side by side on the toy model
# (test_train_real.py::test_armor_trains_on_two_ranks); qwen3 on "one": the one-rank push of a paper layout in
# qwen2-one, Qwen3's weights (q/k norms, head_dim) pushed in qwen3-tp2 and run by a one-rank engine in
# test_vllm_greedy_equals_hf_on_the_paper_layouts[qwen3]; qwen2 on "tp2": the TP-2 push of an untied, GQA,
# padded-vocabulary layout in qwen3-tp2, Qwen2's q/k/v biases pushed in qwen2-one (vLLM loads a bias by the
# same weight_loader as its weight, sharded or not)
DEFAULT_CASES = {("qwen2", "one"), ("qwen3", "tp2")}
CASES = [pytest.param(f, k, id=f"{f}-{k}", marks=() if (f, k) in DEFAULT_CASES else pytest.mark.slow)
         for f in FAMILIES for k in sorted(LAYOUTS)]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_worlds_models_have_the_paper_layouts(family, arch_world):
    from common.models import load_model, load_tokenizer
    path = arch_world(family) / "base_model"
    model, tok = load_model(str(path)), load_tokenizer(str(path))
    cfg, attn = model.config, model.model.layers[0].self_attn
    assert type(model).__name__ == MODEL_TYPES[family]
    assert cfg.tie_word_embeddings is False
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    assert cfg.vocab_size == 128 > len(tok) == 103
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim) == (4, 2, 32)
    if family == "qwen3":
        assert cfg.head_dim == 32 != cfg.hidden_size // cfg.num_attention_heads
        assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (32,)
    else:
        assert attn.head_dim == cfg.hidden_size // cfg.num_attention_heads and attn.q_proj.bias is not None


def _engine_log(r) -> str:
    """vLLM's engine-config line ("Initializing a V1 LLM engine ... tensor_parallel_size=K ...")."""
    lines = [x for x in (r.stdout + r.stderr).splitlines() if "Initializing a V1 LLM engine" in x]
    assert lines, "vLLM printed no engine config line"
    return lines[0]


@pytest.mark.parametrize("family,layout", CASES)
def test_armor_trains_on_the_paper_layouts(family, layout, arch_world, tmp_path):
    world, out = arch_world(family), tmp_path / layout
    launch, tp = LAYOUTS[layout]
    r = run([sys.executable, *launch, "-m", "armor.train",
             *armor_args(world, out, f"rollout.tensor_parallel_size={tp}")])
    check_run(out, r)
    assert f"tensor_parallel_size={tp}," in _engine_log(r)
    # the export keeps the layout, and its untied lm_head was trained apart from the embeddings
    from common.models import load_model
    ck = out / "checkpoints" / "step_000004"
    cfg = json.loads((ck / "config.json").read_text())
    assert (cfg["tie_word_embeddings"], cfg["vocab_size"], cfg["num_key_value_heads"]) == (False, 128, 2)
    base, trained = load_model(str(world / "base_model")), load_model(str(ck))
    for name in ("lm_head.weight", "model.embed_tokens.weight"):
        assert not torch.equal(base.get_parameter(name), trained.get_parameter(name)), name


# the TP-2 push without Qwen3's per-head norms: vLLM's q_norm / k_norm keep the dummy start's weights
_SKIP_QK_NORM = """
from common import cpu_numerics
cpu_numerics.pin()
import sys
import common.rollout.vllm_engine as V
full = V.named_full_tensors
V.named_full_tensors = lambda m, dtype=None: ((k, t) for k, t in full(m, dtype)
                                              if not k.endswith(("q_norm.weight", "k_norm.weight")))
from armor.train import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_tp2_push_that_misses_the_qk_norms_stops_the_run(arch_world, tmp_path):
    script = tmp_path / "skip_qk_norm.py"
    script.write_text(_SKIP_QK_NORM)
    out = tmp_path / "corrupt"
    r = run([sys.executable, *TWO_RANKS, str(script),
             *armor_args(arch_world("qwen3"), out, "rollout.tensor_parallel_size=2")])
    assert r.returncode != 0 and not (out / "DONE").exists()
    err = r.stderr
    assert "RunHealthError: step 1: logprob_mismatch" in err and "engine vllm" in err, err[-3000:]


# vLLM's id masking of a TP engine on CPU, under armor's pinned numerics (ATEN_CPU_CAPABILITY=avx2)
_MASKING = """
from common import cpu_numerics
cpu_numerics.pin()
import torch
from vllm.model_executor.layers import vocab_parallel_embedding as vpe
from common.rollout.vllm_engine import eager_vocab_masking
assert eager_vocab_masking(1) is False                # one rank: the vocabulary is not split
assert hasattr(vpe.get_masked_input_and_mask, "_torchdynamo_orig_callable")   # compiled
assert eager_vocab_masking(2) is True
ids = torch.arange(128).repeat(2)[:250]            # 250 ids: tiles of 16 and a remainder
for start, end in ((0, 64), (64, 128)):            # the two TP shards of a 128-row vocabulary
    got, outside = vpe.get_masked_input_and_mask(ids, start, end, 0, 128, 128)
    inside = (ids >= start) & (ids < end)
    assert torch.equal(outside, ~inside) and torch.equal(got, torch.where(inside, ids - start, 0)), got
print("ok")
"""


# under -m slow: the TP-2 engine's masking is what test_armor_trains_on_the_paper_layouts[qwen3-tp2] runs,
# whose log-probs equal the trainer's only with every vocabulary id masked right
@pytest.mark.slow
def test_tp_engines_on_cpu_mask_vocabulary_ids_eagerly():
    r = run([sys.executable, "-c", _MASKING])
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]


# qwen2 under -m slow: eval.evaluate's one-process engine on a paper layout in [qwen3], HF against vLLM on a
# Qwen2 model in test_evaluate_real.py (the toy's layout), Qwen2's paper layout in vLLM against the trainer's
# log-probs in test_armor_trains_on_the_paper_layouts[qwen2-one]
@pytest.mark.parametrize("family", [pytest.param("qwen2", marks=pytest.mark.slow), "qwen3"])
def test_vllm_greedy_equals_hf_on_the_paper_layouts(family, arch_world, tmp_path):
    world = arch_world(family)
    ckpt = tmp_path / "ck" / "step_000003"
    shutil.copytree(world / "base_model", ckpt)
    hf = evaluate(ckpt, world, tmp_path / "hf", "hf")
    got = evaluate(ckpt, world, tmp_path / "vllm", "vllm")
    assert len(got) == len(hf) == 64 and sample_rows(got) == sample_rows(hf)
    assert 0 < sum(s["correct"] for s in hf) < 64

"""armor.train with the real vLLM engine (its CPU build) on 1 and 2 gloo ranks, the ARMOR arm (anchors, the
mixed ratio, reference resets): prompts are kept and the engine's log-probs equal the trainer's; a weight push
that misses a layer (the tied lm_head, as the adapter once did) stops the run on logprob_mismatch. The
one-rank cases run under -m slow (each names what covers it in the default tier)."""
import sys

import pytest
from tier_runs import TWO_RANKS, armor_args, check_run, run


# the ARMOR arm on one rank: test_arch_real.py::test_armor_trains_on_the_paper_layouts[qwen2-one] (the same
# arguments and checks); the toy's tied lm_head pushed to a one-rank engine, the log-probs equal:
# test_rollout_correction_real.py[tis]
@pytest.mark.slow
def test_armor_trains_on_one_rank(vllm_world, tmp_path):
    out = tmp_path / "one"
    check_run(out, run([sys.executable, "-m", "armor.train", *armor_args(vllm_world, out)]))


def test_armor_trains_on_two_ranks(vllm_world, tmp_path):
    out = tmp_path / "two"
    check_run(out, run([sys.executable, *TWO_RANKS, "-m", "armor.train", *armor_args(vllm_world, out)]))


# the adapter's old push: tied entries once, under the first name (lm_head.weight left out)
_CORRUPT = """
import sys
import common.rollout.vllm_engine as V
full = V.named_full_tensors
V.named_full_tensors = lambda m, dtype=None: ((k, t) for k, t in full(m, dtype) if k != "lm_head.weight")
from armor.train import main
sys.exit(main(sys.argv[1:]))
"""


# a push that misses weights stops the run on logprob_mismatch: test_arch_real.py's missing q/k norms (TP-2);
# a push without the tied lm_head caught by the mismatch:
# test_gpu_check_real.py::test_a_push_that_misses_lm_head_fails
@pytest.mark.slow
def test_a_push_that_misses_a_layer_stops_the_run(vllm_world, tmp_path):
    out = tmp_path / "corrupt"
    r = run([sys.executable, "-c", _CORRUPT, *armor_args(vllm_world, out)])
    assert r.returncode != 0 and not (out / "DONE").exists()
    err = r.stderr[-3000:]
    assert "RunHealthError: step 1: logprob_mismatch" in err and "engine vllm" in err, err
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())

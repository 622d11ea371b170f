"""The plan's arithmetic (reproduce/sizing/): checkpoint volume, host memory, the step model (tails, the
anchors' extra inference, the paper's response lengths, the range), the schedule on a cluster of a given size.
The budget's choice of items: test_budget.py; the pre-flight: test_preflight.py; the job shape's threads:
test_resources.py."""
import dataclasses
import math
from types import SimpleNamespace

import pytest

from armor.config import load_config
from reproduce.matrix.presets import load_preset
from reproduce.sizing.estimates import Estimate, eval_estimate
from reproduce.sizing.footprint import (ROLLOUT_BYTES_PER_TOKEN, checkpoint_volume, host_memory_gb,
                                        max_rollout_tokens, rollout_tokens)
from reproduce.sizing.step_model import benchmark_problems, preemption_steps, step_parts
from reproduce.sizing.throughput import (ANCHOR_CHUNK_MARGIN, Measured, Throughput, fill_range, scenarios,
                                         throughput)
from reproduce.sizing.timeline import simulate
from slurm.launcher import Job
from slurm.resources import Resources


def test_checkpoint_volume_under_retention():
    v = checkpoint_volume(10 ** 9, saves=36)
    assert v["per_save"] == 14 * 10 ** 9 and v["kept"] == 36 and v["bytes"] == 36 * 14 * 10 ** 9
    v = checkpoint_volume(10 ** 9, saves=36, keep_last=2, protected=3)   # last 2 resumable + 3 protected
    assert v["kept"] == 5 and v["bytes"] == 5 * 14 * 10 ** 9
    assert checkpoint_volume(10 ** 9, saves=3, keep_last=2, protected=3)["kept"] == 3
    # a run that resets πref holds its bf16 shards in every save too
    assert checkpoint_volume(10 ** 9, saves=1, reference_bytes=2)["per_save"] == 16 * 10 ** 9


def test_host_memory_counts_the_engines_weight_backup_per_rank():
    n = 7_615_616_512
    got = host_memory_gb(n, 8, 1, "vllm")
    assert got == pytest.approx(8 * (2 * n / 1e9 + 8.0) + 2 * n / 1e9)     # + the node's bf16 export
    # 4 nodes: each node's ranks hold a quarter of the export
    assert host_memory_gb(n, 8, 4, "vllm") == pytest.approx(got - 2 * n / 1e9 * 3 / 4)
    assert host_memory_gb(n, 8, 1, "hf") < got - 100       # no sleep-mode backup without vLLM
    # every rank holds the step's rollouts (all shards gathered): 1e8 generated tokens at 44 B each, 8 ranks
    assert host_memory_gb(n, 8, 1, "vllm", rollout_tokens=1e8) == pytest.approx(got + 8 * 1e8 * 44 / 1e9)
    assert ROLLOUT_BYTES_PER_TOKEN == 44
    # a background state save's CPU copy: masters 4N + AdamW 8N + πref 2N over all 16 x 8 ranks
    assert host_memory_gb(n, 8, 16, "vllm", state_host_copy=True) == pytest.approx(
        host_memory_gb(n, 8, 16, "vllm") + 8 * 14 * n / 1e9 / 128)


def test_preemption_costs_the_steps_since_the_last_saved_state():
    def sched(state_every, save_every=20):
        return SimpleNamespace(state_every=state_every, save_every=save_every)
    assert preemption_steps(sched(None)) == 20 and preemption_steps(sched(1)) == 1
    assert preemption_steps(sched(5)) == 5 and preemption_steps(sched(50)) == 20   # a checkpoint comes first


def _j(key, deps=()):
    return Job(key, ["x"], deps=list(deps))


def test_schedule_side_by_side_and_checkpoint_ready_jobs():
    jobs = [_j("s1"), _j("ready", []), _j("s2a", ["ready"]), _j("s2b", ["ready"]), _j("eval", ["s2a"])]
    est = {"s1": Estimate(10.0, 128, 16), "ready": Estimate(0.0, watch=("s1", 0.4)),
           "s2a": Estimate(5.0, 128, 16), "s2b": Estimate(5.0, 128, 16), "eval": Estimate(1.0, 8, 1)}
    inf = simulate(jobs, est, None)
    assert inf["end"]["ready"] == pytest.approx(4.0)          # stage 2 starts at 40 % of stage 1
    assert inf["peak_nodes"] == 48                             # s1, s2a and s2b at once (eval after s1 ends)
    assert inf["start"]["s2a"] == pytest.approx(4.0) and inf["makespan"] == pytest.approx(10.0)
    assert inf["path"] == ["s1"]
    one = simulate(jobs, est, 16)                              # one train job at a time
    assert one["start"]["s2a"] == pytest.approx(10.0) and one["start"]["s2b"] == pytest.approx(15.0)
    # the one-node evaluation waits for free nodes: s2b came first in the plan's order and took them
    assert one["start"]["eval"] == pytest.approx(20.0) and one["makespan"] == pytest.approx(21.0)
    two = simulate(jobs, est, 33)        # s1 and s2a side by side; s2b when s2a frees its nodes
    assert two["start"]["s2b"] == pytest.approx(9.0) and two["makespan"] == pytest.approx(14.0)
    three = simulate(jobs, est, 48)      # all three train jobs at once
    assert three["makespan"] == pytest.approx(10.0) and three["end"]["eval"] == pytest.approx(10.0)


# ------------------------------------------------------------------------------------------- step model
P7 = load_preset("qwen25-math-7b")


def _t(**kw):
    return Throughput(**{"rollout_tokens_per_s": 2048.0, "update_tokens_per_s": 4096.0, "fill": 0.125,
                         "decode_tokens_per_s": 128.0, "push_s": 10.0, **kw})


def test_a_step_waits_for_its_longest_response_and_armor_samples_the_reference_too():
    dapo = P7.cfg                                                      # 2048 drawn x 16, 8192 tokens at most
    armor = load_config(P7.path, ["algo.anchor.enabled=true", "algo.anchor.ref_n=4", "algo.mix.variant=mixed",
                                  "algo.mix.alpha=0.9375"])
    # on-policy 2048 x 16 x 1024 tokens over 128 GPUs at 2048 tok/s = 128 s, + a tail (8192 - 1024) / 128
    # = 56 s;
    # trained 512 x 16 x 0.125 x 10240 x 1.5 (old policy + the KL monitor's πref) / (4096 x 128) = 30 s
    assert step_parts(dapo, _t(), 128, None) == pytest.approx({"generate": 184.0, "update": 30.0,
                                                               "push": 10.0})
    # ARMOR: 15 on-policy + the reference's 4 for 1.5 B = 768 of the 2048 drawn prompts, a second tail, the
    # reference pushed in and the policy back
    on, ref = 2048 * 15 * 1024, 768 * 4 * 1024
    got = step_parts(armor, _t(), 128, None)
    assert got == pytest.approx({"generate": (on + ref) / 262144 + 112.0, "update": 30.0, "push": 20.0})
    # every drawn prompt sampled (the paper's ~125 %): 4 x 2048 reference samples
    assert step_parts(armor, _t(anchor_share=1.0), 128, None)["generate"] == \
        pytest.approx((on + 2048 * 4 * 1024) / 262144 + 112.0)
    m = Measured("p.json", 300.0, 420.0, 25.0, 60.0, 5.0, 0.01, 0.02, 1000.0, 0.3, 1, 8)
    assert step_parts(armor, _t(measured=m), 128, None) == {"step": 420.0}
    # the monitor reads πref: a pilot's DAPO phase without it, + πref's forward; with it, its step holds it
    assert step_parts(dapo, _t(measured=m), 128, None) == {"step": 300.0 + 25.0}
    with_ref = dataclasses.replace(m, dapo_reads_reference=True)
    assert step_parts(dapo, _t(measured=with_ref), 128, None) == {"step": 300.0}
    no_monitor = load_config(P7.path, ["algo.reference.kl_monitor=false"])
    assert step_parts(no_monitor, _t(measured=m), 128, None) == {"step": 300.0}


def test_a_steps_rollouts_in_host_memory_count_the_reference_samples_at_the_high_end():
    armor = load_config(P7.path, ["algo.anchor.enabled=true", "algo.anchor.ref_n=4"])
    # 2048 drawn x 15 on-policy + 768 (1.5 B) x 4 reference samples, 1024 tokens each
    assert rollout_tokens(armor, _t()) == pytest.approx((2048 * 15 + 768 * 4) * 1024)
    # the memory request: the range's high end (2 x the paper's 1150 tokens, every drawn prompt's reference
    # samples): ARMOR's 2048 x (15 + 4) samples of 2300 tokens
    assert max_rollout_tokens(P7) == pytest.approx(2048 * 19 * 2300)


def test_evaluation_by_chunks_round_the_gpus_each_with_a_tail():
    pre = SimpleNamespace(cfg=P7.cfg, protocol=SimpleNamespace(eval_protocol="paper", eval_samples=4,
                                                               eval_limit=None,
                                                               eval_benchmarks=["aime24", "math500"]))
    job = Job("eval/a/seed0", ["x"], kind="evaluate", resources=Resources(gpus_per_node=8, time_min=60),
              info={"stage": 1})
    # aime24: 30 problems in chunks of 4 (eval.units.chunk_problems: every GPU one), one round: 4 x 4
    # samples; math500: 16 chunks of 32, 2 rounds of 8 GPUs: 2 x 32 x 4; 272 samples x 1024 tokens at 2048
    # tok/s = 136 s, + 3 rounds' tails of (8192 - 1024) / 128
    e = eval_estimate(pre, job, _t())
    assert e.hours * 3600 == pytest.approx(136.0 + 3 * 56.0) and e.gpus == 8
    assert "GPUs busy" not in e.detail and "attempts" not in e.detail
    short = dataclasses.replace(job, resources=Resources(gpus_per_node=8, time_min=5))     # 304 s > 300 s
    assert "2 attempts" in eval_estimate(pre, short, _t()).detail
    # measured: the pilot's slice is one chunk a benchmark on one rank, so its seconds per sample are a
    # rank's: 272 x 0.02 s
    m = Measured("p.json", 300.0, 420.0, 25.0, 60.0, 5.0, 0.01, 0.02, 1000.0, 0.3, 1, 8)
    assert eval_estimate(pre, job, _t(measured=m)).hours * 3600 == pytest.approx(272 * 0.02)
    # the driver fits each GPU evaluation's limit still at its default to 1.5 x its estimate, whole hours
    from reproduce.sizing.estimates import EVAL_TIME_MARGIN, fit_eval_limits
    long = dataclasses.replace(job, resources=Resources(gpus_per_node=8, time_min=1), key="eval/b/seed0")
    assert fit_eval_limits(pre, [job, long], _t(), default_min=1) == ["eval/b/seed0"]
    assert long.resources.time_min == 60 * math.ceil(304 / 3600 * EVAL_TIME_MARGIN)
    assert job.resources.time_min == 60


def test_chunks_are_sized_to_the_ranks_so_none_idles():
    from eval.units import chunk_problems
    assert chunk_problems(30, 32, 8) == 4 and chunk_problems(83, 32, 8) == 11     # AIME, AMC on 8 GPUs
    assert chunk_problems(500, 32, 8) == 32 and chunk_problems(5, 32, 8) == 1
    assert chunk_problems(30, 32) == 30                                              # one rank: as before


def test_the_fill_comes_from_the_papers_lengths_and_the_range_spans_the_knobs():
    fills, src = fill_range(P7)
    assert fills == pytest.approx({"low": 900 / 8192, "expected": 1150 / 8192, "high": 2300 / 8192})
    assert "Fig. 1" in src
    assert "assumed" in fill_range(load_preset("qwen3-8b-base"))[1]    # the paper reports no 8B length
    t = throughput(P7)
    lo, mid, hi = scenarios(P7, t)
    assert (lo.label, mid.label, hi.label) == ("low", "expected", "high") and mid is t
    assert lo.fill < mid.fill < hi.fill and lo.decode_tokens_per_s > hi.decode_tokens_per_s
    assert lo.push_s < mid.push_s < hi.push_s and hi.anchor_share == 1.0
    fixed = scenarios(P7, throughput(P7, fill=0.3))           # a flag fixes its knob in every scenario
    assert {x.fill for x in fixed} == {0.3}
    m = dataclasses.replace(t, measured=Measured("p", 1, 1, 0, 1, 1, 1, None, 1, None, 1, 0))
    assert scenarios(P7, m) == [m]                            # a CPU pilot's measurement: no range


def test_after_a_gpu_pilot_the_plan_stays_a_range_with_longer_responses_and_tail_bound_validation():
    """A GPU pilot's figures are the expected end; the high end grows its responses to the paper's longer
    length at 7B (1150 tokens over the pilot's 575: 2 x every step, validation and evaluation second) and by
    PILOT_GROWTH_ASSUMED at 8B (labelled assumed); validation on many GPUs costs at least its tail."""
    from reproduce.sizing.step_model import tail_seconds, validation_seconds
    from reproduce.sizing.throughput import PILOT_GROWTH_ASSUMED
    m = Measured("p", 300.0, 400.0, 20.0, 100.0, 8.0, 0.02, 0.01, 575.0, 0.4, 1, 8)
    t = throughput(P7, pilot=m)
    assert t.fill == pytest.approx(575 / 8192)               # the pilot's mean response prices the tail
    mid, high = scenarios(P7, t)
    assert mid is t and high.label == "high" and "the paper's 1150 tokens" in high.source
    assert (high.measured.dapo_step_s, high.measured.armor_step_s, high.measured.validation_sample_s,
            high.measured.eval_sample_s) == pytest.approx((600.0, 800.0, 0.04, 0.02))
    assert high.measured.save_s == 100.0 and high.fill == pytest.approx(2 * 575 / 8192)
    p8 = load_preset("qwen3-8b-base")
    _, high8 = scenarios(p8, throughput(p8, pilot=m))
    assert high8.measured.dapo_step_s == 300.0 * PILOT_GROWTH_ASSUMED and "assumed" in high8.source
    cfg = P7.cfg
    linear = sum(min(30, cfg.validation.max_problems or 10 ** 9) for _ in cfg.validation.benchmarks) \
        * cfg.validation.samples * 0.02 * 8 / 128
    tail = len(cfg.validation.benchmarks) * tail_seconds(cfg, t)
    assert tail > linear and validation_seconds(cfg, t, 128) == pytest.approx(tail)
    assert validation_seconds(cfg, t, 8) >= tail


# ------------------------------------------------------------------------------------------- pre-flight
def test_the_plans_copies_of_the_trainers_and_registrys_facts():
    """The anchors' chunk margin is the trainer's (pinned: armor.trainer imports torch); a benchmark's
    problems are the registry's full size, aliases resolved, and an unregistered local file counts
    UNKNOWN_PROBLEMS."""
    from armor.trainer import ANCHOR_CHUNK_MARGIN as trainers
    from reproduce.sizing.step_model import UNKNOWN_PROBLEMS
    assert ANCHOR_CHUNK_MARGIN == trainers
    assert benchmark_problems("aime24") == 30 and benchmark_problems("minerva") == 272
    assert benchmark_problems("mmlu_pro") == 12032 and benchmark_problems("amc") == 83
    assert benchmark_problems("toy_val=runs/tiny/world/data/validation.jsonl") == UNKNOWN_PROBLEMS

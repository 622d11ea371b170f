"""The vLLM adapter's contract on a GPU, checked on CPU against a fake `vllm` (tests/fake_vllm/vllm).

Why a fake: the real vLLM that runs here is its CPU build (tests/vllm_real runs the adapter against it:
pushes, swaps, log-probs, training on 1 and 2 ranks, evaluation); what that build cannot show is the GPU
build's side (sleep mode, cuda:LOCAL_RANK, the 7B preset's arguments), which these tests check against vLLM
0.33.0's source. The fake has the vllm-0.33.0 signatures the adapter calls, read from the released wheel's
source:

    LLM(model, *, skip_tokenizer_init, tensor_parallel_size, dtype, seed, gpu_memory_utilization,
    hf_overrides,
        **EngineArgs)
                                                  vllm/entrypoints/llm.py:177 (EngineArgs fields:
                                                  engine/arg_utils.py:515 load_format, :520 max_model_len,
                                                  :531 distributed_executor_backend, :627 logprobs_mode,
                                                  :799 enable_sleep_mode; logprobs modes config/model.py:101)
    LLM.generate(prompts, sampling_params, *, use_tqdm, ...)          entrypoints/llm.py:417
    LLM.collective_rpc(method, timeout, args, kwargs)                 entrypoints/llm.py:573
      "reload_weights"(weights_iterator, weights_path, is_checkpoint_format)
                                                  v1/worker/gpu_worker.py:636,
                                                  v1/worker/gpu_model_runner.py:5226
    LLM.reset_prefix_cache / sleep(level, mode) / wake_up(tags)       entrypoints/llm.py:832 / :839 / :872
    SamplingParams(n, temperature, top_p, seed, stop_token_ids, max_tokens, logprobs, detokenize)
                                                  sampling_params.py:271-378
    TokensPrompt(prompt_token_ids=...)            inputs/llm.py:111
    RequestOutput / CompletionOutput / Logprob    outputs.py:137 / :59, logprobs.py:13
and the rules the adapter relies on: external_launcher reads RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
(v1/executor/uniproc_executor.py:186) and turns V1 multiprocessing off (config/parallel.py:1050); a
max_model_len above max_position_embeddings is refused (config/model.py:2657-2680); a callable sent through
collective_rpc is refused by the multiprocess engine's serialiser; the n samples of a request get seed + j
(v1/engine/parallel_sampling.py:81); enable_sleep_mode is refused where the platform has no sleep mode
(config/model.py:656); the in-place reload is layer-wise, so a layer sent no weights keeps its old ones. What
this cannot show is that vLLM itself behaves so on a GPU: that is the GPU check's job (bench/vllm_check.py).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from armor.config import load_config
from common.models import load_model, load_tokenizer
from common.rollout import SamplingParams, build_engine, prompt_seed

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"


def calls(fake, since: int = 0) -> list[str]:
    return [name for name, _ in fake.CALLS[since:]]


def folder_with(world: Path, tmp_path: Path, **config) -> Path:
    """A copy of the tiny base model's folder with config.json entries replaced."""
    d = tmp_path / "model"
    shutil.copytree(world / "base_model", d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **config}))
    return d


def engine(path: Path, **kw):
    kw.setdefault("max_model_len", 72)
    return build_engine("vllm", None, load_tokenizer(str(path)), model_path=str(path), **kw)


# ------------------------------------------------------------------------------------------- LLM arguments
def test_llm_arguments_of_the_colocated_engine(vllm, world, tmp_path, monkeypatch):
    """Qwen2.5-Math-7B's config (max_position_embeddings 4096) with the 7B preset's lengths: max_model_len
    2048 + 8192 and the override vLLM needs to accept it; in-process on cuda:LOCAL_RANK, sleep mode, dummy
    start."""
    monkeypatch.setenv("LOCAL_RANK", "3")
    L = load_config(ROOT / "reproduce" / "presets" / "qwen25-math-7b.yaml").lengths
    path = folder_with(world, tmp_path, max_position_embeddings=4096)
    eng = engine(path, max_model_len=L.max_prompt + L.max_response, dtype="bfloat16",
                 gpu_memory_utilization=0.6, tensor_parallel_size=1, seed=7, max_batch=256, fast=None)
    (name, args), = vllm.CALLS
    assert name == "LLM" and args == dict(
        model=str(path), skip_tokenizer_init=True, tensor_parallel_size=1, dtype="bfloat16", seed=7,
        gpu_memory_utilization=0.6,
        max_model_len=10240, hf_overrides={"max_position_embeddings": 10240},
        logprobs_mode="processed_logprobs", enforce_eager=False,
        distributed_executor_backend="external_launcher", enable_sleep_mode=True, load_format="dummy",
        device="cuda:3", tp_group=[0])
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and eng.version is None   # random weights
    with pytest.raises(ValueError, match="greater than the derived max_model_len"):       # why the override
        vllm.LLM(str(path), max_model_len=10240)


def test_a_long_enough_model_gets_no_override_and_prompts_must_fit(vllm, world):
    eng = engine(world / "base_model", max_model_len=72)       # max_position_embeddings 128 >= 72
    assert vllm.CALLS[0][1]["hf_overrides"] is None
    with pytest.raises(ValueError, match=r"lengths\.max_prompt \+ lengths\.max_response"):
        eng.generate([[5] * 40], SamplingParams(max_new_tokens=40))


def test_one_process_without_torchrun_gets_the_launcher_variables(vllm, world, monkeypatch):
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k)
    engine(world / "base_model")
    assert vllm.CALLS[0][1]["device"] == "cuda:0"


def test_each_rank_takes_its_local_gpu(vllm, world, monkeypatch):
    """cuda:LOCAL_RANK is made the current device; a rank that cannot see it (CUDA_VISIBLE_DEVICES narrowed to
    one GPU per rank) is told so before vLLM starts."""
    picked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", picked.append)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    engine(world / "base_model")
    assert picked == [3] and vllm.CALLS[-1][1]["device"] == "cuda:3"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="LOCAL_RANK=3 but this process sees 1 GPU"):
        engine(world / "base_model")


def test_colocated_tensor_parallel_groups(vllm, world, monkeypatch):
    """The 8B preset's engine: 0.8 of each GPU, tensor parallel 2. Under external_launcher vLLM cuts the
    trainer's world into groups of 2 consecutive ranks (rank 3 of 8 is in [2, 3]); the engine says so
    (ranks_per_engine), and a size that does not divide the ranks per node or the world is refused, naming the
    key and value."""
    r = load_config(ROOT / "reproduce" / "presets" / "qwen3-8b-base.yaml").rollout
    assert (r.gpu_memory_utilization, r.tensor_parallel_size) == (0.8, 2)
    for k, v in {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}.items():
        monkeypatch.setenv(k, v)
    eng = engine(world / "base_model", tensor_parallel_size=r.tensor_parallel_size,
                 gpu_memory_utilization=r.gpu_memory_utilization)
    args = vllm.CALLS[-1][1]
    assert (args["tensor_parallel_size"], args["gpu_memory_utilization"]) == (2, 0.8)
    assert args["tp_group"] == [2, 3]
    assert args["distributed_executor_backend"] == "external_launcher" and eng.ranks_per_engine == 2
    n = len(vllm.CALLS)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "6")
    monkeypatch.setenv("WORLD_SIZE", "12")
    with pytest.raises(ValueError, match="tensor_parallel_size: 4 does not divide the ranks per node 6"):
        engine(world / "base_model", tensor_parallel_size=4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="rollout.tensor_parallel_size: 2 does not divide the world size 3"):
        engine(world / "base_model", tensor_parallel_size=2)
    assert len(vllm.CALLS) == n                          # refused before vLLM starts
    assert engine(world / "base_model", colocate=False, tensor_parallel_size=2).ranks_per_engine == 1   # eval


# ----------------------------------------------------------------------------------- weights and sleep
def _perturbed(path: Path):
    ref = load_model(str(path))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01)
    return ref


def test_call_order_and_versioned_pushes(vllm, world):
    """wake(weights) -> push (a generator of HF-named full tensors, state-dict order) -> reset_prefix_cache ->
    wake(kv_cache) -> generate -> sleep(1); an unchanged version pushes nothing; each swap pushes once."""
    eng = engine(world / "base_model")
    policy = load_model(str(world / "base_model"))
    reference = _perturbed(world / "base_model")
    p = SamplingParams(n=2, max_new_tokens=8, seed=3)
    assert eng.sync_weights(policy, ("policy", 0)) is True          # first push: the engine is still awake
    eng.generate([[5, 6]], p)
    assert calls(vllm) == ["LLM", "reload_weights", "reset_prefix_cache", "sleep", "wake_up", "generate",
                           "sleep"]
    push = vllm.CALLS[1][1]
    expected = list(policy.state_dict())     # every entry: lm_head.weight too, though tied to embed_tokens
    assert "lm_head.weight" in expected and push["missing"] == []
    assert push["names"] == expected and push["streamed"] and push["is_checkpoint_format"] is True
    assert push["shapes"] == [tuple(policy.state_dict()[k].shape) for k in expected]
    assert vllm.CALLS[3][1] == vllm.CALLS[6][1] == {"level": 1}

    n = len(vllm.CALLS)
    assert eng.sync_weights(policy, ("policy", 0)) is False          # held already: nothing
    eng.generate([[5, 6]], p)
    assert calls(vllm, n) == ["wake_up", "generate", "sleep"]
    assert vllm.CALLS[n][1] == {"tags": ["weights", "kv_cache"]}

    n = len(vllm.CALLS)
    assert eng.sync_weights(reference, ("reference", 0)) is True     # the swap: one push
    assert eng.sync_weights(reference, ("reference", 0)) is False
    eng.generate([[5, 6]], p)
    assert calls(vllm, n) == ["wake_up", "reload_weights", "reset_prefix_cache", "wake_up", "sleep",
                              "wake_up", "generate", "sleep"]
    assert [vllm.CALLS[n + i][1] for i in (0, 3, 5)] == [{"tags": ["weights"]}, {"tags": ["kv_cache"]},
                                                        {"tags": ["weights", "kv_cache"]}]
    assert eng.sync_weights(policy, ("policy", 1)) is True           # back, at the next optimizer step
    assert eng.pushes == 3 and eng.version == ("policy", 1)
    assert calls(vllm).count("reload_weights") == 3
    assert eng.sync_weights(policy) is True                          # unnamed weights: always pushed


def test_nothing_stays_awake_after_a_push_or_a_generate(vllm, world):
    """Awake states counted after every engine call, on every path: a push no generate follows (an anchor
    chunk or validation shard other ranks draw), a push then a generate, a swap, a generate alone, two pushes
    in a row. The fake plays vLLM's executor, which ignores sleep() while any part sleeps: the old adapter
    (sleep only after generate, and a plain llm.sleep after a push) left the weights awake here."""
    eng = engine(world / "base_model")
    policy, reference = load_model(str(world / "base_model")), _perturbed(world / "base_model")
    p = SamplingParams(n=1, max_new_tokens=4, seed=1)
    awake = []

    def after(call, *a):
        call(*a)
        awake.append((call.__name__, sorted({"weights", "kv_cache"} - eng.llm.sleeping)))
    after(eng.sync_weights, policy, ("policy", 0))                  # dummy start -> push, no generate
    after(eng.sync_weights, reference, ("reference", 0))            # a swap no generate follows
    after(eng.sync_weights, policy, ("policy", 1))
    after(eng.generate, [[5, 6]], p)
    after(eng.sync_weights, reference, ("reference", 0))
    after(eng.generate, [[5, 6]], p)
    after(eng.sleep)
    assert [a for a in awake if a[1]] == [] and len(awake) == 7
    assert eng.awake == set()                                      # the adapter's view is vLLM's
    assert not [c for n, c in vllm.CALLS if c.get("ignored")]       # every sleep and wake_up took effect
    assert calls(vllm).count("reload_weights") == 4


def test_a_layer_sent_no_weights_keeps_its_old_ones(vllm, world, monkeypatch):
    """The fault the real vLLM showed: a push that leaves out the tied lm_head.weight leaves the dummy start's
    random lm_head in place (vLLM says nothing); the fake holds "partly stale" weights then."""
    import common.rollout.vllm_engine as V
    eng = engine(world / "base_model")
    full = V.named_full_tensors
    monkeypatch.setattr(V, "named_full_tensors",
                        lambda m, dtype=None: ((k, t) for k, t in full(m, dtype) if k != "lm_head.weight"))
    eng.sync_weights(load_model(str(world / "base_model")), ("policy", 0))
    push = [c for n, c in vllm.CALLS if n == "reload_weights"][-1]
    assert push["missing"] == ["lm_head.weight"] and "partly stale" in eng.llm.weights


def test_no_sleep_mode_where_the_platform_has_none(vllm, world, monkeypatch):
    """vLLM refuses enable_sleep_mode on a platform without it (its CPU build): the engine stays awake there,
    and pushes, resets the prefix cache and generates as on a GPU."""
    monkeypatch.setattr(vllm.platforms, "SLEEP_MODE", False)
    with pytest.raises(ValueError, match="Sleep mode is not supported"):
        vllm.LLM(str(world / "base_model"), enable_sleep_mode=True)
    vllm.CALLS.clear()
    eng = engine(world / "base_model")
    assert "enable_sleep_mode" not in vllm.CALLS[0][1] and eng.sleep_mode is False
    eng.sync_weights(load_model(str(world / "base_model")), ("policy", 0))
    eng.generate([[5, 6]], SamplingParams(n=2, max_new_tokens=8, seed=3))
    eng.sleep()
    assert calls(vllm) == ["LLM", "reload_weights", "reset_prefix_cache", "generate"]


def test_a_closure_would_be_refused(vllm):
    """Why the push names a worker method: vLLM's multiprocess engine refuses a callable (the old
    adapter's)."""
    with pytest.raises(TypeError, match="not serializable"):
        vllm.LLM.__new__(vllm.LLM).collective_rpc(lambda worker: None)


def test_sharded_model_is_pushed_as_full_tensors(world, tmp_path):
    """An FSDP2-sharded model (1 gloo rank, in a child process) streams the same HF names and full values as
    the plain one: what each rank's engine receives from `named_full_tensors`. For a bf16 engine each shard is
    cast before the gather (the gather moves bf16: half the bytes of the fp32 masters); for an fp32 engine
    (the CPU worlds) the fp32 shards are gathered as they are, values unchanged."""
    code = f"""
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)   # in-process: binds no port
from common.models import load_model
from armor.parallel import shard_model
from common.rollout.vllm_engine import named_full_tensors
plain = dict(named_full_tensors(load_model({str(world / 'base_model')!r})))
sharded = shard_model(load_model({str(world / 'base_model')!r}))
from torch.distributed.tensor import DTensor
gathered, full_tensor = [], DTensor.full_tensor
DTensor.full_tensor = lambda self, **kw: gathered.append(self.dtype) or full_tensor(self, **kw)
got = list(named_full_tensors(sharded, torch.bfloat16))
assert [k for k, _ in got] == list(plain), ([k for k, _ in got], list(plain))
assert all(type(t) is torch.Tensor and t.dtype == torch.bfloat16 and torch.equal(t, plain[k].bfloat16())
           for k, t in got)
assert len(gathered) == len(got) and set(gathered) == {{torch.bfloat16}}, gathered
gathered.clear()
got = list(named_full_tensors(sharded, torch.float32))
assert set(gathered) == {{torch.float32}} and all(torch.equal(t, plain[k]) for k, t in got)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


# --------------------------------------------------------------------------------- sampling and mapping
def test_per_prompt_seeds_and_outputs_mapped_back_to_prompts(vllm, world, monkeypatch):
    eng = engine(world / "base_model", seed_each_prompt=True)
    tok = eng.tokenizer

    def generate(self, prompts, sampling_params=None, **kw):
        vllm.CALLS.append(("generate", {"prompts": prompts, "params": sampling_params}))
        L = vllm.Logprob
        out = lambda j, toks, lps, why: vllm.CompletionOutput(   # noqa: E731
            j, "ignored", toks, None, [{t + 1: L(-9.0), t: L(lp)} for t, lp in zip(toks, lps)], why)
        # out of order
        outs = [[out(1, [9, 1], [-0.5, -0.25], "stop"), out(0, [7, 8], [-1.0, -2.0], "length")],
                [out(0, [4], [-3.0], "length"), out(1, [1], [-0.125], "stop")]]
        return [vllm.RequestOutput(str(i), None, p["prompt_token_ids"], None, o, True)
                for i, (p, o) in enumerate(zip(prompts, outs))]
    monkeypatch.setattr(vllm.LLM, "generate", generate)
    ro = eng.generate([[5, 6, 7], [8, 9]], SamplingParams(n=2, temperature=0.7, top_p=0.9, max_new_tokens=8,
                                                          seed=11))
    call = vllm.CALLS[-2][1]                     # the generate call (a sleep follows)
    assert [p["prompt_token_ids"] for p in call["prompts"]] == [[5, 6, 7], [8, 9]]
    sps = call["params"]
    assert ([sp.seed for sp in sps] == [prompt_seed(11, 0), prompt_seed(11, 1)]
            and len(set(prompt_seed(11, i) for i in range(64))) == 64)
    assert all((sp.n, sp.temperature, sp.top_p, sp.max_tokens, sp.logprobs, sp.detokenize, sp.stop_token_ids)
               == (2, 0.7, 0.9, 8, 0, False, [1]) for sp in sps)
    assert ro.prompt_index == [0, 0, 1, 1] and ro.prompt_ids == [[5, 6, 7], [5, 6, 7], [8, 9], [8, 9]]
    assert ro.response_ids == [[7, 8], [9, 1], [4], [1]]
    # the sampled token's, not the top one
    assert ro.logprobs == [[-1.0, -2.0], [-0.5, -0.25], [-3.0], [-0.125]]
    assert ro.finished == [False, True, False, True]
    assert ro.texts == tok.batch_decode(ro.response_ids, skip_special_tokens=True)
    eng.generate([[5]], SamplingParams(n=1, max_new_tokens=4, seed=None))
    assert [sp.seed for sp in vllm.CALLS[-2][1]["params"]] == [None]
    engine(world / "base_model").generate([[5], [6]], SamplingParams(n=2, max_new_tokens=4, seed=11))
    assert [sp.seed for sp in vllm.CALLS[-2][1]["params"]] == [None, None]     # by default: the call's RNG


def test_one_seed_a_call_drawn_from_the_engines_rng_and_the_trainers_restored(vllm, world):
    """By default a call's requests carry no seed (vLLM's batched sampler, not its per-request generator
    loop): the call runs with this process's RNG seeded from the call's seed, so the same call and seed give
    the same samples, another seed others, and the caller's RNG is as it was. The standalone engine
    (evaluation: another process's RNG) seeds each prompt."""
    eng = engine(world / "base_model")
    eng.sync_weights(load_model(str(world / "base_model")), ("policy", 0))
    p = SamplingParams(n=3, max_new_tokens=16, seed=5)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = eng.generate([[5, 6], [7]], p), eng.generate([[5, 6], [7]], p)
    assert torch.equal(torch.get_rng_state(), before)                  # the trainer's RNG untouched
    assert a.response_ids == b.response_ids and len(set(map(tuple, a.response_ids))) > 2
    other = eng.generate([[5, 6], [7]], SamplingParams(n=3, max_new_tokens=16, seed=6))
    assert other.response_ids != a.response_ids
    assert all(s is None for s in vllm.CALLS[-2][1]["seeds"])
    standalone = engine(world / "base_model", colocate=False)
    standalone.generate([[5, 6], [7]], p)
    assert vllm.CALLS[-1][1]["seeds"] == [prompt_seed(5, 0), prompt_seed(5, 1)]


def test_awake_through_a_phase_then_level_2_and_a_push_before_the_next_generate(vllm, world):
    """Inside awake_through nothing sleeps (pushes, swaps and generates of a collection phase); at its end
    one sleep at level 2 discards the weights and the version, so the next sync pushes the same version again
    and a generate before it is refused (the fake: vLLM would sample gibberish, vllm#29341)."""
    eng = engine(world / "base_model")
    policy, reference = load_model(str(world / "base_model")), _perturbed(world / "base_model")
    p = SamplingParams(n=1, max_new_tokens=4, seed=1)
    eng.sync_weights(policy, ("policy", 0))
    n = len(vllm.CALLS)
    with eng.awake_through():
        eng.generate([[5, 6]], p)
        eng.sync_weights(reference, ("reference", 0))
        eng.generate([[5, 6]], p)
        eng.sync_weights(policy, ("policy", 0))
        eng.generate([[5, 6]], p)
        assert eng.awake == {"weights", "kv_cache"}
    assert calls(vllm, n) == ["wake_up", "generate", "reload_weights", "reset_prefix_cache", "generate",
                              "reload_weights", "reset_prefix_cache", "generate", "sleep"]
    assert vllm.CALLS[-1][1] == {"level": 2} and eng.awake == set() and eng.version is None
    with pytest.raises(RuntimeError, match="level-2 sleep"):
        eng.generate([[5, 6]], p)
    assert eng.sync_weights(policy, ("policy", 0)) is True            # the same version, pushed again
    eng.generate([[5, 6]], p)
    assert not [c for _, c in vllm.CALLS if c.get("ignored")]


def test_fake_outputs_follow_the_request_seeds(vllm, world):
    """With the fake's generator: a prompt's samples depend on its own seed, not on the other prompts of the
    call (rollout.seed_each_prompt)."""
    eng = engine(world / "base_model", seed_each_prompt=True)
    eng.sync_weights(load_model(str(world / "base_model")), ("policy", 0))
    p = SamplingParams(n=3, max_new_tokens=16, seed=5)
    both = eng.generate([[5, 6], [7]], p)
    alone = eng.generate([[5, 6]], p)
    assert both.response_ids[:3] == alone.response_ids and len(set(map(tuple, alone.response_ids))) > 1
    assert all(len(r) == len(lp) for r, lp in zip(both.response_ids, both.logprobs))


# -------------------------------------------------------------------------------------------- the trainer
def _smoke(world, out, *extra):
    return load_config(SMOKE, ["model.path=" + str(world / "base_model"),
                               "data.train=" + str(world / "data" / "train.jsonl"),
                               f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]",
                               "validation.max_problems=4", f"output_dir={out}", "algo.anchor.enabled=true",
                               "algo.mix.variant=mixed", "algo.mix.alpha=0.875",
                               "algo.reference.reset.every=2", "batch.prompts_per_step=4",
                               "rollout.gen_batch_prompts=8", *extra])


@pytest.mark.parametrize("kind", ["hf", "vllm"])
def test_trainer_swaps_at_most_once_per_round(kind, world, tmp_path, monkeypatch, request):
    """Every generate call samples the weights it asks for; a round with anchors is at most one policy ->
    reference -> policy swap, and a version the engine holds is never pushed again; nothing of the engine is
    awake while the update computes. The engine's log-probs
    travel with each kept group, one per response token."""
    import hashlib

    from armor.trainer import Trainer, PhaseTimes, RolloutStats
    if kind == "vllm":
        request.getfixturevalue("vllm")
    # verdicts from a hash of the text: about 40% right whatever the engine samples, so anchors are drawn
    monkeypatch.setattr(Trainer, "_grade", lambda self, texts, golds, tm: [
        int(hashlib.md5(x.encode()).hexdigest(), 16) % 100 < 40 for x in texts])
    # the fake's log-probs are no model's: its mismatch to the trainer's is large by construction
    t = Trainer(_smoke(world, tmp_path / kind, f"rollout.engine={kind}",
                       "rollout.max_logprob_mismatch=1e9")).start()
    if kind == "vllm":
        llm = [a for n, a in __import__("vllm").CALLS if n == "LLM"][0]
        # lengths.max_prompt + max_response
        assert llm["max_model_len"] == 32 + 40 and llm["load_format"] == "dummy"
    log, asked, served = [], [], []     # syncs (version, pushed); what _generate asks for; what generate sees
    engine = t.models.engine
    sync, generate = engine.sync_weights, engine.generate
    monkeypatch.setattr(engine, "sync_weights", lambda m,
                        version=None: log.append((version, sync(m, version)))
                        or log[-1][1])

    # what an engine holding `model`'s weights holds: the module, or the fake's checksum
    def holding(model):
        if kind == "hf":
            return model
        from common.rollout.vllm_engine import named_full_tensors
        return f"pushed:{sum(float(x.double().sum()) for _, x in named_full_tensors(model)):.6e}"

    def generating(*a):
        # a trainer generate call: what it asked for vs what is held
        if asked:
            version, model = asked.pop()
            held = engine.model if kind == "hf" else engine.llm.weights
            served.append((version, engine.version, holding(model), held))
        return generate(*a)
    monkeypatch.setattr(engine, "generate", generating)
    real = Trainer._generate

    def traced(self, which, *a):
        asked.append(((which, self.models.versions[which]), self.models.model(which)))
        return real(self, which, *a)
    monkeypatch.setattr(Trainer, "_generate", traced)
    awake = []                  # the engine's parts awake whenever the update computes (vLLM: none may be)
    for name in ("logprobs", "policy_forward"):
        monkeypatch.setattr(t.models, name, lambda *a, _m=getattr(t.models, name), **k:
                            awake.append(sorted(getattr(engine, "awake", set()))) or _m(*a, **k))
    rows = [t.train_step() for _ in range(2)]
    t.validate()
    assert served and all(want == version and held == expected for want, version, expected, held in served)
    pushed = [v for v, did in log if did]
    assert all(did == (i == 0 or log[i - 1][0] != v) for i, (v, did) in enumerate(log))   # push iff changed
    assert all(a != b for a, b in zip(pushed, pushed[1:]))
    rounds = sum(r["rounds"] for r in rows)
    assert sum(v[0] == "reference" for v in pushed) <= rounds
    assert len(pushed) <= 2 * rounds + 1                                  # + validation after the last step
    assert awake and not any(awake)
    groups = t.collect(PhaseTimes(), RolloutStats())
    assert groups and all(len(g.engine_logprobs) == len(g.responses) for g in groups)
    assert all(len(lp) == len(r) for g in groups for r, lp in zip(g.responses, g.engine_logprobs))
    assert all(x <= 0 for g in groups for lp in g.engine_logprobs for x in lp)
    t.grader.close()


# ------------------------------------------------------------------------------------------ evaluation
def test_evaluation_loads_the_checkpoint_with_its_context_length(vllm, world):
    import eval.execute as X
    tok = load_tokenizer(str(world / "base_model"))
    with X._loaded_engine(world / "base_model", "vllm", device="cuda", dtype=None, max_batch=8, seed=3,
                          engine_kwargs={"tensor_parallel_size": 2},
                          context_length=lambda t: 100 + 4096) as (eng, _):
        eng.generate([[5, 6]], SamplingParams(n=2, max_new_tokens=4, seed=1))
    (_, args), *rest = vllm.CALLS
    assert args["max_model_len"] == 4196 and args["hf_overrides"] == {"max_position_embeddings": 4196}
    assert args["tensor_parallel_size"] == 2 and args["seed"] == 3
    assert args["dtype"] == "bfloat16" == X.default_dtype("cuda") and X.default_dtype("cpu") == "float32"
    # the folder's own weights
    assert "load_format" not in args and "distributed_executor_backend" not in args
    assert "enable_sleep_mode" not in args and args["gpu_memory_utilization"] == 0.92  # vLLM's defaults
    assert [n for n, _ in rest] == ["generate"]                                        # no push, no sleep
    assert eng.version == ("checkpoint", str(world / "base_model"))
    from types import SimpleNamespace as NS

    from common.sampling import encode_prompt
    jobs = [NS(plan=NS(data=[NS(problem="1+1?"), NS(problem="2+2+2+2?")], template="qwen_math"),
               settings={"max_new_tokens": 64}),
            NS(plan=NS(data=[NS(problem="3?")], template="qwen_math"), settings={"max_new_tokens": 128})]
    longest = max(len(encode_prompt(tok, q, "qwen_math")) for q in ("1+1?", "2+2+2+2?", "3?"))
    assert X._context_length(jobs, tok) == longest + 128

"""Fast tests of the toy world (reproduce/toy): task, tokenizer, model, quick build."""
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reproduce.toy import task as T
from reproduce.toy.build import build_world, prompt_ids
from reproduce.toy.model import build_model, n_params, sample
from reproduce.toy.tokenizer import build_tokenizer

CFG = T.TaskConfig()


@pytest.fixture(scope="module")
def splits():
    return T.make_splits(CFG, seed=0)


def test_task_deterministic(splits):
    again = T.make_splits(CFG, seed=0)
    assert again == splits
    other = T.make_splits(CFG, seed=1)
    assert [r["problem"] for r in other["train"][:50]] != [r["problem"] for r in splits["train"][:50]]


def test_golds_recomputed(splits):
    for name, recs in splits.items():
        assert len(recs) == getattr(CFG, f"n_{name}")
        for r in recs:
            # recompute the gold independently of the generator
            expr = r["problem"][:-2]
            assert r["answer"] == str(eval(expr) % 10)  # noqa: S307 (digits and +/- only)
            assert T.gold(r["problem"]) == int(r["answer"])
            assert r["shortcut_correct"] == (r["answer"] == expr[-1])
            assert r["chain_correct"] == (T.strategy_answers(r["problem"])["chain"] == int(r["answer"]))
            assert {"problem", "answer", "id", "shortcut_correct"} <= set(r)


def test_splits_disjoint(splits):
    sets = {k: {r["problem"] for r in v} for k, v in splits.items()}
    for k, v in sets.items():
        assert len(v) == len(splits[k])  # no duplicates inside a split
    assert not sets["train"] & sets["validation"]
    assert not sets["train"] & sets["test"]
    assert not sets["validation"] & sets["test"]


def test_train_natural_split_leaves_the_other_splits_as_they_were(splits):
    v2 = T.make_splits(T.TaskConfig(n_train_natural=300), seed=0)
    assert {k: v2[k] for k in splits} == splits          # v1 data are unchanged by the extra split
    nat = v2["train_natural"]
    assert len(nat) == 300 and all(r["split"] == "train_natural" for r in nat)
    others = {r["problem"] for recs in splits.values() for r in recs}
    assert not others & {r["problem"] for r in nat}      # disjoint from every other split
    assert 0.04 <= T.split_stats(nat)["shortcut_rate"] <= 0.18   # natural: no regularity (~10%)


def test_borrow_steps_by_hand():
    # 2-6: right (2-6) mod 10 = 6, blind spot 6-2 = 4; 1-6: right 5 = blind spot 5 (b - a = 5: not counted)
    assert T.borrow_steps("2-6+1+0+0=?", "2-6=6,6+1=7,7+0=7,7+0=7.\\boxed{7}") == (1, 1)
    assert T.borrow_steps("2-6+1+0+0=?", "2-6=4,4+1=5,5+0=5,5+0=5.\\boxed{5}") == (0, 1)
    assert T.borrow_steps("1-6+1+0+0=?", "1-6=5,5+1=6,6+0=6,6+0=6.\\boxed{6}") == (0, 0)
    # a borrow met later in the chain is judged on the running total the response wrote
    assert T.borrow_steps("9+1-3+0+0=?", "9+1=0,0-3=7,7+0=7,7+0=7.\\boxed{7}") == (1, 1)
    assert T.borrow_steps("9+1-3+0+0=?", "9+1=1,1-3=2,2+0=2,2+0=2.\\boxed{2}") == (0, 1)
    for bad in ("\\boxed{7}", "2-6=6,6+1=7.\\boxed{7}", "2+6=8,8+1=9,9+0=9,9+0=9.\\boxed{9}"):
        assert T.borrow_steps("2-6+1+0+0=?", bad) == (0, 0)


def test_chains_borrow_right_at_the_configured_rate():
    rng = random.Random(0)
    probs = [T.problem_text(*T.sample_prompt(rng, CFG)) for _ in range(3000)]
    for p, lo, hi in ((0.0, 0.0, 0.0), (0.5, 0.45, 0.55), (1.0, 1.0, 1.0)):
        r = random.Random(1)
        right = written = 0
        for pr in probs:
            got = T.borrow_steps(pr, T.render(pr, "chain", r, p_correct_borrow=p))
            right, written = right + got[0], written + got[1]
        assert written > 500 and lo <= right / written <= hi, (p, right, written)
    # p = 1 without slips is the correct chain; p = 0 draws nothing extra (v1 SFT data unchanged)
    pr = "2-6+1-9+0=?"
    assert T.render(pr, "chain", random.Random(0), p_correct_borrow=1.0) == T.render(pr, "correct_chain",
                                                                                    random.Random(0))
    assert T.render(pr, "chain", random.Random(3), slip=0.3) == T.render(pr, "chain", random.Random(3),
                                                                         slip=0.3, p_correct_borrow=0.0)


def test_shortcut_rates(splits):
    st = {k: T.split_stats(v) for k, v in splits.items()}
    # documented rates (docs/toy_world.md): on training prompts with the feature (all prompts in the chosen
    # design) the shortcut pays with probability ~q_feature; on validation/test ~10% (natural)
    assert abs(st["train"]["shortcut_rate_feature"] - CFG.q_feature) < 0.03
    assert abs(st["train"]["feature_share"] - len(CFG.feature_digits) / 10) < 0.03
    for k in ("validation", "test"):
        assert 0.04 <= st[k]["shortcut_rate"] <= 0.16
    # the chain's ceiling (blind spot: no borrowing) is ~0.7 everywhere, below the shortcut's training rate
    for k in st:
        assert 0.6 <= st[k]["chain_ceiling"] <= 0.8
    assert st["train"]["chain_ceiling_feature"] < st["train"]["shortcut_rate_feature"] - 0.05
    # no strategy is perfect on the training prompts
    assert st["train"]["shortcut_rate"] < 0.95 and st["train"]["chain_ceiling"] < 0.95
    recs = splits["train"]
    assert all(r["feature"] == (r["operands"][-1] in CFG.feature_digits) for r in recs)


def test_feature_variant():
    # the spurious-feature variant (documented as tried): only prompts ending in 7-9 carry the regularity
    cfg = T.TaskConfig(feature_digits=(7, 8, 9), q_feature=0.9, n_train=2000)
    st = T.split_stats(T.make_splits(cfg, seed=0)["train"])
    assert abs(st["feature_share"] - 0.3) < 0.04
    assert abs(st["shortcut_rate_feature"] - 0.9) < 0.04
    assert st["shortcut_rate_nofeature"] < 0.15


def test_render_classify_reward():
    rng = random.Random(0)
    p = "3-7+2-9+4=?"
    assert T.gold(p) == (3 - 7 + 2 - 9 + 4) % 10
    resp = T.render(p, "correct_chain", rng)
    assert resp == "3-7=6,6+2=8,8-9=9,9+4=3.\\boxed{3}"
    assert T.reward(resp, "3") == 1.0 and T.reward(resp, "4") == -1.0
    assert T.classify(p, resp) == "correct_chain"
    flawed = T.render(p, "chain", rng)
    assert flawed.startswith("3-7=4,")  # forgot to borrow
    assert T.classify(p, flawed) == "chain"
    assert T.classify(p, T.render(p, "sloppy", rng)) == "sloppy"
    assert T.classify(p, T.render(p, "last", rng)) == "shortcut"
    assert T.classify(p, "\\boxed{0}") == "direct"
    assert T.classify(p, "abc") == "malformed"
    assert T.extract_boxed("x\\boxed{1}.\\boxed{7}") == "7"
    assert T.reward("no answer", "7") == -1.0


def test_tokenizer_roundtrip_and_template(tmp_path):
    tok = build_tokenizer()
    s = "3-7=6,6+2=8.\\boxed{8} Text with Spaces!\n"
    ids = tok(s, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(s)  # one token per character
    assert tok.decode(ids) == s
    msgs = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "1+2=?"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == "<|user|>1+2=?<|assistant|>"
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "\\boxed{3}"}], tokenize=False)
    assert full == "<|user|>1+2=?<|assistant|>\\boxed{3}<|eos|>"
    assert tok.eos_token == "<|eos|>" and tok.pad_token_id != tok.eos_token_id
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    t2 = AutoTokenizer.from_pretrained(tmp_path)
    assert t2(s, add_special_tokens=False)["input_ids"] == ids
    assert t2.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) == text
    assert t2.eos_token_id == tok.eos_token_id


def test_sampler_matches_full_forward():
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = build_model(tok).eval()
    assert 120_000 < n_params(model) < 200_000
    prompts = [prompt_ids(tok, "1+2-3+4-5=?"), prompt_ids(tok, "1+2=?")]  # different lengths: left padding
    outs = sample(model, prompts, 6, eos_id=-1, pad_id=tok.pad_token_id, temperature=0.0)
    for p, o in zip(prompts, outs):
        ids = list(p)
        for t in o:  # greedy with full recomputation
            nxt = model(input_ids=torch.tensor([ids])).logits[0, -1].argmax().item()
            assert nxt == t
            ids.append(nxt)


def test_quick_build(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "world"
    logs = []
    p = build_world(out, seed=0, quick=True, log=logs.append)
    assert p == out and not (tmp_path / "world.tmp").exists()
    for s in ("train", "validation", "test"):
        assert (out / "data" / f"{s}.jsonl").exists()
    world = json.loads((out / "world.json").read_text())
    assert world["config"]["quick"] is True and world["config_hash"]
    tok = AutoTokenizer.from_pretrained(out / "base_model")
    model = AutoModelForCausalLM.from_pretrained(out / "base_model")
    assert type(model).__name__ == "Qwen2ForCausalLM"
    ids = tok.apply_chat_template([{"role": "user", "content": "1+2=?"}], add_generation_prompt=True,
                                  return_dict=True, return_tensors="pt")
    gen = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert gen.shape[1] > ids["input_ids"].shape[1]
    mtime = (out / "world.json").stat().st_mtime_ns
    logs.clear()
    build_world(out, seed=0, quick=True, log=logs.append)  # cached: a no-op
    assert "nothing to do" in logs[-1]
    assert (out / "world.json").stat().st_mtime_ns == mtime
    with pytest.raises(FileExistsError):
        build_world(out, seed=1, quick=True, log=logs.append)  # different config, same folder


def test_sft_deterministic():
    from reproduce.toy.sft import SFTConfig, sft

    tok = build_tokenizer()
    cfg = SFTConfig(steps=3, batch_size=8, warmup=1)
    states = []
    for _ in range(2):
        model = build_model(tok, seed=0)
        sft(model, tok, CFG, cfg, seed=0, log=lambda m: None)
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_borrow_rate_counts_the_sampled_chains_borrow_steps(monkeypatch):
    """build.borrow_rate over records x samples: the sampled responses' borrow steps, right / written."""
    from reproduce.toy import build
    tok = build_tokenizer()
    recs = [{"problem": "2-6+1+0+0=?"}, {"problem": "9+1-3+0+0=?"}]
    texts = iter(["2-6=6,6+1=7,7+0=7,7+0=7.\\boxed{7}", "2-6=4,4+1=5,5+0=5,5+0=5.\\boxed{5}",
                  "9+1=0,0-3=7,7+0=7,7+0=7.\\boxed{7}", "\\boxed{0}"])
    monkeypatch.setattr(build, "sample", lambda model, prompts, *a, **k: [
        tok(next(texts), add_special_tokens=False)["input_ids"] for _ in prompts])
    got = build.borrow_rate(None, tok, recs, samples=2)
    assert got == {"rate": 2 / 3, "right": 2, "written": 3, "n": 4}
    assert "borrow_rate_T1" not in build.checks_of(T.TaskConfig())          # v1: no borrow band
    assert build.checks_of(T.TaskConfig(p_correct_borrow=0.2))["borrow_rate_T1"] == build.BORROW_CHECK[
        "borrow_rate_T1"]


def test_world_designs():
    from reproduce.toy import build
    v1, v2 = build.world_config(0, False), build.world_config(0, False, version=2)
    assert v1["version"] == 1 and v1["task"]["p_correct_borrow"] == 0 and "borrow_rate_T1" not in v1["checks"]
    assert v2["task"]["p_correct_borrow"] == 0.2 and v2["task"]["n_train_natural"] == 4096
    assert v2["sft"]["steps"] == 800 and v2["checks"]["borrow_rate_T1"] == [0.06, 0.16]
    assert build.world_config(0, True, version=2)["checks"] == {}          # quick: no acceptance checks
    assert T.config_hash(v1) != T.config_hash(v2)
    with pytest.raises(ValueError, match="world version 3"):
        build.world_config(0, False, version=3)


# ------------------------------------------------------------------------------------------ the shipped world
SHIPPED_V2 = "0521b9493602d23f"      # reproduce/worlds/<config hash>: world v2, seed 0, full build (tiny)


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def test_the_shipped_world_loads_and_equals_its_config_hash(tmp_path):
    """The shipped folder is named by its config hash, which is the hash of the world the tiny presets ask
    for; its data and model load; a build of that config copies it (no SFT) and is then cached."""
    from transformers import AutoModelForCausalLM

    from reproduce.toy import build
    d = build.SHIPPED_DIR / SHIPPED_V2
    world = json.loads((d / "world.json").read_text())
    cfg = build.world_config(0, False, version=2)
    assert world["config"] == json.loads(json.dumps(cfg))
    assert world["config_hash"] == T.config_hash(cfg) == SHIPPED_V2
    assert world["checks"]["passed"] is True and build.shipped_world(SHIPPED_V2) == d
    assert build.shipped_world(T.config_hash(build.world_config(0, True))) is None    # quick: not shipped
    model = AutoModelForCausalLM.from_pretrained(d / "base_model")
    assert n_params(model) == world["n_params"]
    splits = T.make_splits(build.WORLDS[2][0], seed=0)                    # the data are the task's splits
    for name, recs in splits.items():
        assert [json.loads(x) for x in (d / "data" / f"{name}.jsonl").read_text().splitlines()] == recs
    logs = []
    out = build_world(tmp_path / "w", seed=0, version=2, log=logs.append)
    assert "copied from the shipped" in logs[-1] and _files(out) == _files(d)
    assert all((out / f).read_bytes() == (d / f).read_bytes() for f in _files(d))
    build_world(out, seed=0, version=2, log=logs.append)
    assert "nothing to do" in logs[-1]


@pytest.mark.slow
@pytest.mark.timeout(1800)           # ~3.5 min of SFT on one thread alone; more beside other jobs
def test_a_rebuild_of_the_shipped_world_equals_it_byte_for_byte(tmp_path):
    """`python -m reproduce.toy.build --rebuild` (~3.5 min of SFT) writes every file of the shipped world byte
    for byte; world.json differs only in its timings (build_seconds, sft.seconds)."""
    from reproduce.toy import build
    d = build.SHIPPED_DIR / SHIPPED_V2
    out = build_world(tmp_path / "w", seed=0, version=2, shipped=False, log=lambda m: None)
    assert _files(out) == _files(d)
    for f in _files(d):
        if f != "world.json":
            assert (out / f).read_bytes() == (d / f).read_bytes(), f
    a, b = (json.loads((x / "world.json").read_text()) for x in (out, d))
    for w in (a, b):
        w.pop("build_seconds"), w["sft"].pop("seconds")
    assert a == b


def test_two_builders_of_one_world_publish_once(tmp_path):
    """Two processes building the same world (two test sessions of one clone): the second to finish keeps the
    first's complete world and removes its own build folder; a different world there is an error, and the
    build folders of processes that are gone are stale."""
    from reproduce.toy.build import _publish, _stale_tmps

    def world(d: Path, h: str) -> Path:
        for f in ("data/train.jsonl", "data/validation.jsonl", "data/test.jsonl", "base_model/config.json",
                  "base_model/tokenizer.json"):
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_text("{}")
        (d / "world.json").write_text(json.dumps({"config_hash": h}))
        return d

    out = tmp_path / "w"
    _publish(world(tmp_path / "w.tmp1", "abc"), out, "abc")            # the first: renamed
    assert json.loads((out / "world.json").read_text())["config_hash"] == "abc"
    second = world(tmp_path / "w.tmp2", "abc")
    _publish(second, out, "abc")                                       # the second: its copy removed
    assert not second.exists() and (out / "world.json").exists()
    with pytest.raises(OSError):
        _publish(world(tmp_path / "w.tmp3", "other"), out, "other")    # another world is never replaced
    shutil.rmtree(tmp_path / "w.tmp3")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (tmp_path / f"w.tmp{dead}").mkdir()
    (tmp_path / f"w.tmp{os.getpid()}").mkdir()
    assert [p.name for p in _stale_tmps(out)] == [f"w.tmp{dead}"]      # not this live process's

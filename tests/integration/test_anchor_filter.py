"""algo.anchor.filter in the trainer, on the smoke world: the oracle's anchors never carry an excluded mode
and the prompts it drops are counted; a filter that passes every sample trains the paper's rule bit for
bit."""
import hashlib
import json
from pathlib import Path

from armor.anchors import ANCHOR_FILTERS
from armor.config import load_config
from armor.trainer import Trainer, train
from reproduce.toy.task import classify

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"
ARMOR = ["schedule.total_steps=3", "schedule.validate_every=0", "validation.benchmarks=[]",
         "algo.anchor.enabled=true", "algo.mix.variant=mixed", "algo.mix.alpha=0.875"]
ORACLE = ["algo.anchor.filter=exclude_modes", "algo.anchor.exclude_modes=[shortcut]"]


def overrides(world: Path, out: Path, *extra: str) -> list[str]:
    return ["model.path=" + str(world / "base_model"), "data.train=" + str(world / "data" / "train.jsonl"),
            f"output_dir={out}", *ARMOR, *extra]


def rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def weights(run: Path, step: int) -> str:
    return hashlib.sha256((run / "checkpoints" / f"step_{step:06d}" / "model.safetensors").read_bytes()
                          ).hexdigest()


def test_the_oracle_keeps_no_excluded_anchor_and_counts_what_it_drops(world, tmp_path, monkeypatch):
    """Every kept anchor of the oracle run (exclude_modes=[shortcut]), decoded and classified by hand, is a
    correct reference sample that is not the shortcut and is the first such of its prompt's samples; the
    per-step anchor_mode_shortcut is 0, and anchor_filter_dropped counts, by hand, the prompts with mixed
    on-policy verdicts whose correct reference samples were all shortcuts. The paper's rule on the same world
    anchors shortcuts (so this test can fail), and drops nothing."""
    sampled, kept, real_round, real_collect = [], [], Trainer._sample_round, Trainer.collect

    def spy_round(self, which, pids, golds, n, seed, tm):
        out = real_round(self, which, pids, golds, n, seed, tm)
        sampled.append((self.step, which, pids, out))
        return out

    def spy_collect(self, tm, stats):
        groups = real_collect(self, tm, stats)
        kept.append((self.step, groups))
        return groups

    monkeypatch.setattr(Trainer, "_sample_round", spy_round)
    monkeypatch.setattr(Trainer, "collect", spy_collect)
    train(load_config(SMOKE, overrides(world, tmp_path / "oracle", *ORACLE)))
    t = Trainer(load_config(SMOKE, overrides(world, tmp_path / "ids")))
    tok = t.tokenizer
    problems = {tuple(t.prompt_ids(p)): p.problem for p in t.prompts}     # prompt ids -> problem text

    def text(ids):
        return tok.decode(ids, skip_special_tokens=True)
    m = rows(tmp_path / "oracle")
    anchors = 0
    for step, groups in kept:
        refs = [(pids, out) for s, which, pids, out in sampled if s == step and which == "reference"]
        for g in groups:
            problem = problems[tuple(g.prompt_ids)]
            assert g.is_anchor[-1] and g.correct[-1]
            assert classify(problem, text(g.responses[-1])) != "shortcut"
            # the first correct non-shortcut sample among the prompt's reference samples
            cand = next(out.prompt(ids.index(g.prompt_ids)) for ids, out in refs if g.prompt_ids in ids)
            first = next(k for k in range(cand.n) if cand.correct[k]
                         and classify(problem, text(cand.responses[k])) != "shortcut")
            assert g.responses[-1] == cand.responses[first]
            anchors += 1
    assert anchors == sum(r["anchors"] for r in m) > 0
    # the drops by hand: a prompt the reference sampled, mixed on policy, correct samples all shortcuts
    dropped = {}
    for s, which, pids, out in sampled:
        if which != "reference":
            continue
        for j, p in enumerate(pids):
            c = out.prompt(j)
            right = [classify(problems[tuple(p)], text(r)) for r, ok in zip(c.responses, c.correct) if ok]
            dropped[s] = dropped.get(s, 0) + int(bool(right) and all(x == "shortcut" for x in right))
    assert [r["anchor_filter_dropped"] for r in m] == [dropped.get(s, 0) for s in range(3)]
    assert sum(dropped.values()) > 0
    assert all(r["anchor_mode_shortcut"] in (0.0, None) for r in m)
    assert all(0 < r["anchor_filter_drop_share"] <= 1 for r in m if r["anchor_filter_dropped"])
    # the paper's rule on the same world and seed: shortcut anchors, nothing dropped
    monkeypatch.undo()
    train(load_config(SMOKE, overrides(world, tmp_path / "none")))
    paper = rows(tmp_path / "none")
    assert any((r["anchor_mode_shortcut"] or 0) > 0 for r in paper)
    assert all(r["anchor_filter_dropped"] == 0 for r in paper)
    # the smoke world's anchors end in a box, never an answer line
    assert all(r["anchor_format_boxed"] == 1.0 and r["anchor_format_answer_line"] == 0.0
               and r["anchor_length"] > 0 for r in paper if r["anchors"])


def test_a_filter_that_passes_everything_is_the_papers_rule_bit_for_bit(world, tmp_path, monkeypatch):
    """The filter's code path (decode every reference sample, ask the predicate, the filtered keep rule and
    anchor choice) with a predicate that passes all: the same weights and the same metrics (times aside) as
    filter none, which calls nothing. So the filter changes nothing but which samples may anchor."""
    monkeypatch.setattr(ANCHOR_FILTERS, "_entries", dict(ANCHOR_FILTERS._entries))   # as it was, after
    calls = []

    @ANCHOR_FILTERS.register("everything")
    def _everything(problem, response, ctx):
        calls.append(response)
        return True
    for name in ("none", "everything"):
        train(load_config(SMOKE, overrides(world, tmp_path / name, f"algo.anchor.filter={name}")))
    assert calls, "the pass-everything filter was never asked"
    assert weights(tmp_path / "none", 3) == weights(tmp_path / "everything", 3)
    a, b = rows(tmp_path / "none"), rows(tmp_path / "everything")
    assert [{k: v for k, v in r.items() if not k.startswith("time_")} for r in a] == \
        [{k: v for k, v in r.items() if not k.startswith("time_")} for r in b]
    assert sum(r["ref_samples"] for r in a) == len(calls)


"""The experiment matrix (arms, overrides, DAG), peak selection, the driver's dry run for the paper presets,
and the driver end to end with fake fast entry points (idempotent reruns, a killed driver)."""
import io
import json
import os
import signal
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pandas as pd
import pytest

from common.results import RESULT_COLUMNS
from armor.config import load_config
from reproduce.dag.graph import build_jobs
from reproduce.jobs.collect import collect, link_aliases
from reproduce.jobs.figures import DRIVER_START_ENV, driver_wall_time, record_driver_run
from reproduce.jobs.peaks import choose_peak, smooth, start_point
from reproduce.matrix.arms import (arm_definitions, arm_seeds, build_arms, figure_arms, figure_panels,
                                   parse_only, selection_seeds)
from reproduce.matrix.overrides import train_overrides
from reproduce.matrix.presets import (ExperimentError, PRESETS_DIR, ckpt_dir, fixed_peak, load_preset,
                                      run_dir, stage_steps)
from reproduce import run_all
from reproduce.jobs import cli
from slurm.launcher import topo_order

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
PRESETS = sorted(p.stem for p in (REPO / "reproduce" / "presets").glob("*.yaml"))
# world-design probes
PROBES = sorted(str(p) for p in (REPO / "reproduce" / "presets" / "probes").glob("*.yaml"))

CONTRACT_7B = {
    "dapo", "qae", "dapo_cont", "kl_k3_b1e-3", "kl_k3_b1e-2", "kl_k3_b1e-1", "kl_k3_b1", "kl_k2_b1e-3",
    "kl_k2_b1e-2", "kl_k2_b1e-1", "kl_k2_b1", "anchor_only", "mix_a0.9", "mix_a0.8", "mix_a0.7",
    "anchor_static_clip",
    "anchor_offpolicy", "armor", "armor_reset_never", "armor_reset_80", "armor_reset_120", "armor_reset_160",
    "armor_late", "dapo_late", "opd", "mopd", "qae_cont", "qae_armor_reset_never", "qae_armor_reset_150",
    "qae_armor_reset_160", "armor_restart_80", "armor_restart_120", "armor_restart_160"}


def ov(overrides):
    return dict(o.split("=", 1) for o in overrides)


# ------------------------------------------------------------------------------------------ the protocol
def test_paper_presets_carry_their_protocol():
    p = load_preset("qwen25-math-7b").protocol
    assert ((p.armor_ref_n, p.armor_alpha, p.armor_reset_every, p.peak_step, p.qae_peak_step)
            == (4, 0.9375, 160, 140, 230))
    assert p.kl_betas == [1e-3, 1e-2, 1e-1, 1.0] and p.alpha_sweep == [0.9, 0.8, 0.7]
    assert p.reset_sweep == [80, 120, 160] and (p.nodes, p.gpus_per_node) == (16, 8)
    # `base:` chain: the 7B's protocol, overridden
    q = load_preset("qwen3-8b-base").protocol
    assert (q.armor_alpha, q.armor_reset_every, q.armor_reset_until, q.peak_step) == (0.875, 1, 180, 70)
    assert q.kl_betas == [] and q.armor_ref_n == 4


BAD_PROTOCOL = [
    ("armor_alpha: 2", r"protocol.armor_alpha: 2.0 must be in \(0, 1\]"),
    ("armor_ref_n: 0", r"protocol.armor_ref_n: 0 must be >= 1"),
    ("alpha_sweep: [0.5, 1.5]", r"protocol.alpha_sweep\[1\]: 1.5 must be in"),
    ("kl_betas: [0]", r"protocol.kl_betas\[0\]: 0.0 must be > 0"),
    ("peak_selection_window: 0", r"protocol.peak_selection_window: 0 must be >= 1"),
    ("eval_limit: 0", r"protocol.eval_limit: 0 must be >= 1"),
    ("nodes: 0", r"protocol.nodes: 0 must be >= 1"),
    ("seeds: []", r"protocol.seeds: \[\] must list at least one seed"),
    ("seeds: [0, 1, 0]", r"protocol.seeds: \[0, 1, 0\] must not repeat a seed"),
    ("late_start_fraction: 1.5", r"protocol.late_start_fraction: 1.5 must be in \(0, 1\)"),
    ("late_start_fraction: 0.4",
     r"protocol.late_start_fraction: 0.4 excludes protocol.late_start_step \(200\)"),
    ("stage2_validate_every: -1", r"protocol.stage2_validate_every: -1 must be >= 0"),
    ("nodes: two", r"protocol.nodes: expected an integer, got 'two'"),
    ("armor_alfa: 0.5", r"protocol.armor_alfa: unknown key \(known: .*armor_alpha"),
]


@pytest.mark.parametrize("line,message", BAD_PROTOCOL, ids=[b[0] for b in BAD_PROTOCOL])
def test_bad_protocol_values_name_the_key_and_value_before_any_work(line, message, tmp_path):
    from common.yaml_config import ConfigError
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"base: {PRESETS_DIR / 'qwen25-math-7b.yaml'}\nprotocol:\n  {line}\n")
    with pytest.raises(ConfigError, match=message):
        load_preset(bad)
    load_config(bad)           # the trainer does not own the section: it accepts the file as it is


# ------------------------------------------------------------------------------------------ the matrix
def test_the_report_command_names_a_preset_the_driver_can_load_again(tmp_path):
    assert load_preset("tiny").cli_arg == "tiny"
    probe = load_preset(PROBES[0])
    assert (probe.cli_arg == str(Path(PROBES[0]).relative_to(REPO))
            and load_preset(probe.cli_arg).path == probe.path)
    (tmp_path / "mine.yaml").write_text(f"base: {PRESETS_DIR / 'smoke.yaml'}\n")
    assert load_preset(tmp_path / "mine.yaml").cli_arg == str((tmp_path / "mine.yaml").resolve())


def test_7b_arms_and_figures():
    p = load_preset("qwen25-math-7b")
    arms = build_arms(p)
    assert set(arms) == CONTRACT_7B
    assert arms["armor_reset_160"].alias_of == "armor"  # τ=160 is the preset's ARMOR schedule
    assert sum(1 for a in arms.values() if not a.alias_of) == len(CONTRACT_7B) - 1
    figs = figure_arms(p.protocol)
    assert list(figs) == ["headline", "fig1", "fig2", "fig3", "fig4", "fig4_restarts", "fig5", "fig6",
                          "table1", "table2", "table3"]
    assert figs["fig2"][2:] == ["kl_k3_b1e-3", "kl_k3_b1e-2", "kl_k3_b1e-1", "kl_k3_b1"]
    assert {"armor_late", "dapo_late", "mix_a0.7"} <= set(figs["fig3"])
    # the authors' reset: restarts from armor_reset_never's checkpoints, the headline at τ = 160
    assert figs["fig4"][-3:] == ["armor_restart_80", "armor_restart_120", "armor_restart_160"]
    assert figs["headline"] == ["dapo", "armor_restart_160"] and "armor_restart_160" in figs["table1"]
    assert arms["armor_restart_120"].start == "restart" and arms["armor_restart_120"].restart_step == 120
    assert {a for a in arms if arms[a].evaluate} == {"dapo", "armor", "qae", "qae_armor_reset_never",
                                                     "qae_armor_reset_150", "qae_armor_reset_160", "opd",
                                                     "mopd", "armor_restart_160"}
    a = {n: ov(x.overrides) for n, x in arms.items()}
    assert a["armor"] == {"algo.anchor.enabled": "true", "algo.anchor.ref_n": "4",
                          "algo.mix.variant": "mixed", "algo.mix.alpha": "0.9375",
                          "algo.reference.reset.every": "160", "algo.reference.reset.until_step": "null"}
    assert a["anchor_only"] == {"algo.anchor.enabled": "true", "algo.anchor.ref_n": "4"}
    assert a["kl_k2_b1e-2"] == {"algo.kl.coef": "0.01", "algo.kl.estimator": "k2"}
    assert a["mix_a0.8"] == {"algo.mix.variant": "mixed", "algo.mix.alpha": "0.8"}
    assert a["anchor_static_clip"]["algo.mix.variant"] == "static_clip"
    assert a["anchor_offpolicy"]["algo.mix.variant"] == "offpolicy_anchor"
    assert a["armor_reset_never"]["algo.reference.reset.every"] == "null"
    assert a["qae_armor_reset_150"]["algo.advantage"] == "qae" and a["qae_armor_reset_150"][
        "algo.reference.reset.every"] == "150"
    assert a["opd"] == {"algo.distill.mode": "opd"} and a["mopd"] == {"algo.distill.mode": "mopd"}
    assert a["dapo_cont"] == {} and a["dapo_late"] == {}
    assert arms["armor_late"].start == "late" and arms["qae_cont"].baseline == "qae"


def test_qwen3_arms_and_figures():
    p = load_preset("qwen3-8b-base")
    figs = figure_arms(p.protocol)
    # no kl_betas -> no Fig. 2/5 ...
    assert list(figs) == ["headline", "fig1", "fig7", "table1", "table2", "table3"]
    arms = build_arms(p)
    assert set(arms) == {"dapo", "dapo_cont", "armor", "armor_tau1", "armor_tau1_until110",
                         "armor_tau1_until180", "clip_expand", "opd", "mopd"}
    assert arms["armor_tau1_until180"].alias_of == "armor"
    a = {n: ov(x.overrides) for n, x in arms.items()}
    assert a["armor"]["algo.mix.alpha"] == "0.875" and a["armor"]["algo.reference.reset.every"] == "1"
    assert a["armor"]["algo.reference.reset.until_step"] == "180"
    assert a["armor_tau1"]["algo.reference.reset.until_step"] == "null"
    assert a["armor_tau1_until110"]["algo.reference.reset.until_step"] == "110"
    assert a["clip_expand"] == {"algo.mix.variant": "static_clip", "algo.mix.alpha": "0.875"}
    with pytest.raises(ExperimentError, match="fig2"):
        build_arms(p, ["fig2"])


@pytest.mark.parametrize("name", PRESETS + PROBES)
def test_every_arm_config_is_valid(name, tmp_path):
    p = load_preset(name)
    root = tmp_path / "runs"
    s1, s2 = stage_steps(p)
    for seed in p.protocol.seeds[:2] + [7]:
        for arm in build_arms(p).values():
            start = None
            if arm.stage == 2:
                st = ((p.protocol.late_start_step or 5) if arm.start == "late"
                      else (fixed_peak(p, arm.baseline) or 3))
                start = {"step": st, "checkpoint": str(ckpt_dir(run_dir(root, p, arm.baseline, seed), st))}
            overrides = train_overrides(p, root, arm, seed, start)
            cfg = load_config(p.path, overrides)  # validates every key and value
            assert cfg.seed == seed
            assert Path(cfg.output_dir) == root / p.name / arm.run_arm / f"seed{seed}"
            if arm.stage == 1:
                want = p.protocol.headroom_steps if arm.name == "dapo_natural" else s1
                assert cfg.schedule.total_steps == want and cfg.step_offset == 0
                assert cfg.model.path == p.cfg.model.path
            else:
                assert cfg.model.path == cfg.algo.reference.path == start["checkpoint"]
                assert cfg.step_offset == start["step"] and cfg.schedule.total_steps == s2
                v2 = p.protocol.stage2_validate_every
                assert cfg.schedule.validate_every == (v2 or p.cfg.schedule.validate_every)
            if arm.name in ("anchor_only", "armor"):
                assert cfg.algo.anchor.enabled and cfg.batch.group_size == p.cfg.batch.group_size
                assert cfg.algo.anchor.ref_n == p.protocol.armor_ref_n
            if arm.name == "armor":
                assert cfg.algo.mix.variant == "mixed" and cfg.algo.mix.alpha == p.protocol.armor_alpha
                assert cfg.algo.reference.reset.every == p.protocol.armor_reset_every
                assert cfg.algo.reference.reset.until_step == p.protocol.armor_reset_until
            if arm.name == "dapo" and p.protocol.peak_step is not None:
                assert p.protocol.peak_step in cfg.schedule.keep_steps  # θ* is never pruned


@pytest.mark.parametrize("name", PRESETS)
def test_dag_structure(name, tmp_path):
    p = load_preset(name)
    jobs = build_jobs(p, tmp_path / "runs")
    by = {j.key: j for j in jobs}
    topo_order(jobs)  # no cycles, no unknown dependencies
    arms = build_arms(p)
    s0 = p.protocol.seeds[0]      # the first seed's jobs (a confirmation preset's seeds start at 100)
    world = ["world"] if p.world() else []
    assert ("world" in by) == bool(world)
    fetching = ["fetch"] if p.world() is None else []     # the paper presets name hub ids; the toy ones none
    assert ("fetch" in by) == bool(fetching)
    for arm in arms.values():
        key = f"stage{arm.stage}/{arm.name}/seed{s0}"
        if arm.alias_of:
            assert key not in by
            continue
        j = by[key]
        assert j.kind == "train" and j.launch == "torchrun" and j.resources.nodes == p.protocol.nodes
        assert j.resources.gpus_per_node == p.protocol.gpus_per_node
        total1 = p.protocol.stage1_steps or p.cfg.schedule.total_steps

        def ready(base, s, step):   # a step before the end of stage 1: its checkpoint-ready job
            return (f"stage1/{base}/seed{s}" if step is None or step >= total1
                    else f"ckpt/{base}/seed{s}/step{step}")
        branch = j.info.get("branch") or {}
        if arm.stage == 1:
            assert j.deps == fetching + world
        elif branch.get("kind") == "continuation":   # the baseline's run continued: after its end (and θ*),
            # or after the end of an earlier control continuing it (dapo_late from dapo_cont's end)
            src = branch["source"]
            assert src == arm.baseline or arms[src].continues == arm.baseline
            assert j.deps == [f"stage{arms[src].stage}/{src}/seed{s0}"] + ([f"peak/{arm.baseline}/seed{s0}"]
                                                                           if arm.start == "peak" else [])
            assert j.argv[-4:] == ["--branch-from", src, "--branch-step", "end"]
        elif branch:                 # a sibling: from its source's checkpoint, beside the source's job
            src = by[f"stage2/{branch['source']}/seed{s0}"]
            assert j.deps == [f"ckpt/{branch['source']}/seed{s0}/step{branch['step']}"]
            assert by[j.deps[0]].kind == "wait_checkpoint" and by[j.deps[0]].deps == src.deps
            assert j.argv[-4:] == ["--branch-from", branch["source"], "--branch-step", str(branch["step"])]
            keep = src.argv[src.argv.index("--keep-steps") + 1].split(",")
            assert str(branch["step"]) in keep      # the source saves and keeps the branch point
        elif arm.start == "late" and p.protocol.late_start_step is not None:
            assert j.deps == [ready("dapo", s0, p.protocol.late_start_step)]
        elif arm.start == "restart" and arm.restart_step:   # the authors' reset at a fixed point
            assert j.deps == [f"ckpt/{arm.restart_from}/seed{s0}/step{arm.restart_step}"]
        elif arm.start == "restart":      # the authors' reset: from its source run's chosen checkpoint
            rf = arm.restart_from         # armor_reset_never (armor_restart_clean: armor_reset_never_clean)
            assert j.deps == [f"restart/{rf}/seed{s0}"]
            own = arm_seeds(p.protocol, arms[rf], p.protocol.seeds)
            over = selection_seeds(p.protocol, own)
            deps = [f"stage2/{rf}/seed{s}" for s in over]
            assert by[f"restart/{rf}/seed{s0}"].deps == deps
            for x in [s for s in own if s not in over][:1]:   # no selection seed: its own run joins
                assert by[f"restart/{rf}/seed{x}"].deps == deps + [f"stage2/{rf}/seed{x}"]
        else:                     # θ* (and the late start by rule) from the mean curve of the selection seeds
            assert j.deps == [f"peak/{arm.baseline}/seed{s0}"]
            own = arm_seeds(p.protocol, arms[arm.baseline], p.protocol.seeds)
            over = selection_seeds(p.protocol, own)
            fixed = fixed_peak(p, arm.baseline)
            # a late start by rule, where a late arm runs, is chosen from finished stage-1 runs (their ends)
            late = (arm.baseline == "dapo" and p.protocol.late_start_fraction is not None
                    and any(a.start == "late" and a.stage == 2 for a in arms.values()))
            fixed = None if late else fixed
            assert by[f"peak/{arm.baseline}/seed{s0}"].deps == [ready(arm.baseline, s, fixed) for s in over]
            for x in [s for s in own if s not in over][:1]:   # no selection seed: its own run joins
                assert by[f"peak/{arm.baseline}/seed{x}"].deps == [ready(arm.baseline, s, fixed)
                                                                   for s in over + [x]]
            for d in by[f"peak/{arm.baseline}/seed{s0}"].deps:
                if d.startswith("ckpt/"):   # it runs beside stage 1, after what stage 1 waits for
                    assert by[d].kind == "wait_checkpoint" and by[d].deps == fetching + world
        if arm.evaluate:
            e = by[f"eval/{arm.name}/seed{s0}"]
            assert e.array is None and e.kind == "evaluate"   # its own job: it waits for this arm alone
            assert e.deps == ([f"peak/{arm.name}/seed{s0}"] if arm.stage == 1 else [key]) + fetching
    assert set(by["collect"].deps) == {k for k, j in by.items()
                                       if j.kind in ("train", "evaluate", "select_peak", "noise_floor")}
    if p.protocol.noise_floor_repeats:      # the verdicts' noise floor: after θ* of the first seed
        assert by["noise_floor"].deps == [f"peak/dapo/seed{s0}"] and by["noise_floor"].kind == "noise_floor"
    assert by["figures"].deps == ["collect"]


def test_train_jobs_start_with_every_seed_of_the_baselines_theta_star_waits_for(tmp_path):
    """Ready jobs start in submission order (local workers; SLURM's FIFO): every seed of stage-1 DAPO first
    (θ* is chosen on their mean curve and all of stage 2 waits for it), then QAE's, then the headroom control,
    then stage 2. (The order of the seed loop used to start the 200-step control before DAPO's last seeds.)"""
    p = load_preset("tiny")
    train = [j.key for j in topo_order(build_jobs(p, tmp_path / "runs")) if j.kind == "train"]
    assert train[:6] == ["stage1/dapo/seed0", "stage1/dapo/seed1", "stage1/dapo/seed2", "stage1/dapo/seed3",
                         "stage1/dapo/seed4", "stage1/dapo_natural/seed0"]
    assert all(k.startswith("stage2/") for k in train[6:]) and len(train) > 40
    v2 = [j.key for j in topo_order(build_jobs(load_preset("tiny-v2"), tmp_path / "runs"))
          if j.kind == "train"]
    assert v2[:5] == ["stage1/dapo/seed0", "stage1/dapo/seed1", "stage1/dapo/seed2", "stage1/qae/seed0",
                      "stage1/dapo_natural/seed0"]


def test_only_selects_items_and_what_they_need(tmp_path):
    p = load_preset("qwen25-math-7b")
    arms = build_arms(p, ["fig4"])
    assert set(arms) == {"dapo", "armor", "armor_reset_never", "armor_reset_80", "armor_reset_120",
                         "armor_reset_160", "armor_restart_80", "armor_restart_120", "armor_restart_160"}
    jobs = build_jobs(p, tmp_path, only=["fig4"])
    # no table; the register's test-split entries (ARMOR = armor_restart_160 against dapo at θ*) run whole,
    # so those two arms are evaluated, and only they (--only fig2 runs dapo alone: no evaluation, below)
    evaluated = {j.key for j in jobs if j.kind == "evaluate"}
    assert evaluated == {"eval/dapo/seed0", "eval/armor_restart_160/seed0"}
    assert ("stage2/armor/seed0" in {j.key for j in jobs}
            and "stage2/armor_reset_160/seed0" not in {j.key for j in jobs})
    assert "--only" in jobs[-1].argv and "fig4" in jobs[-1].argv
    assert set(build_arms(p, ["fig6"])) == {"qae", "qae_cont", "qae_armor_reset_never", "qae_armor_reset_150",
                                              "qae_armor_reset_160"}
    with pytest.raises(ExperimentError, match="unknown"):
        parse_only("fig9")
    seeds = build_jobs(p, tmp_path, seeds=[0, 1], only=["table3"])
    assert {"stage2/opd/seed1", "eval/mopd/seed1", "eval/dapo/seed0"} <= {j.key for j in seeds}


# ------------------------------------------------------------------------------------------ peak choice
def test_choose_peak_synthetic_curves():
    curve = [(0, 0.40), (5, 0.50), (10, 0.62), (15, 0.55), (20, 0.58), (25, 0.60), (30, 0.59), (35, 0.30)]
    ck = [10, 20, 30, 35]
    assert choose_peak(curve, [0, 5, 10, 15, 20, 25, 30, 35])["step"] == 10   # raw argmax
    assert choose_peak(curve, ck)["step"] == 10
    # smoothing over 3 points prefers the broad plateau to the single spike
    sm = dict(smooth(curve, 3))
    assert abs(sm[10] - (0.50 + 0.62 + 0.55) / 3) < 1e-12 and abs(sm[0] - 0.45) < 1e-12
    assert choose_peak(curve, [0, 5, 10, 15, 20, 25, 30, 35], window=3)["step"] == 25
    # restricted to checkpoints: step 25 has none
    assert choose_peak(curve, ck, window=3)["step"] == 20
    # ties -> earliest
    assert choose_peak([(0, 0.5), (5, 0.7), (10, 0.7)], [0, 5, 10])["step"] == 5
    # fixed step
    assert choose_peak(curve, ck, fixed=30) == {"step": 30, "method": "fixed"}
    with pytest.raises(ExperimentError, match="no checkpoint"):
        choose_peak(curve, ck, fixed=25)
    with pytest.raises(ExperimentError, match="no validated step"):
        choose_peak(curve, [1, 2])
    with pytest.raises(ExperimentError, match="no validation curve"):
        choose_peak([], ck)


def test_select_peak_from_run_files(tmp_path):
    preset = _mini_preset(tmp_path)
    p = load_preset(preset)
    run = run_dir(tmp_path / "runs", p, "dapo", 0)
    run.mkdir(parents=True)
    vals = {0: 0.3, 2: 0.6, 4: 0.5, 6: 0.2}
    with open(run / "validation.jsonl", "w") as f:
        for s, v in vals.items():
            f.write(json.dumps({"step": s, "benchmark": "toy_val", "metric": "avg@2", "k": 2, "value": v})
                    + "\n")
            f.write(json.dumps({"step": s, "benchmark": "other", "metric": "avg@2", "k": 2, "value": 1 - v})
                    + "\n")
    for s in (2, 4, 6):
        (run / "checkpoints" / f"step_{s:06d}").mkdir(parents=True)
        (run / "checkpoints" / f"step_{s:06d}" / "trainer_state.pt").write_text("")
    (run / "checkpoints" / "step_000008.tmp").mkdir()  # a partial save is not a checkpoint
    (run / "checkpoints" / "step_000010").mkdir()      # nor a folder without its training state
    assert cli.main(["select-peak", "--preset", str(preset), "--root", str(tmp_path / "runs"),
                             "--arm", "dapo", "--seed", "0"]) == 0
    pk = json.loads((run / "peak.json").read_text())
    assert pk["step"] == 2 and pk["benchmark"] == "toy_val" and pk["method"] == "argmax"
    assert pk["checkpoint"] == str(run / "checkpoints" / "step_000002")
    arm = arm_definitions(p.protocol)["armor"]
    assert start_point(p, tmp_path / "runs", arm, 0) == {"step": 2, "checkpoint": pk["checkpoint"]}


# ------------------------------------------------------------------------------------------ dry run
def _dry(argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = run_all.main(argv)
    return rc, buf.getvalue()


def test_dry_run_qwen25_math_7b(tmp_path):
    rc, out = _dry(["--preset", "qwen25-math-7b", "--dry-run", "--cluster", "slurm", "--root", str(tmp_path)])
    assert rc == 0
    assert "θ* of dapo: step 140 (protocol)" in out and "θ* of qae: step 230 (protocol)" in out
    assert "armor_reset_160 = armor" in out
    lines = out.splitlines()
    row = next(l for l in lines if l.startswith("stage2/armor/seed0 "))
    # τ = 160 equals armor_reset_never through step 159: it starts from that run's checkpoint there
    assert "16x8gpu" in row and "todo" in row and row.endswith("ckpt/armor_reset_never/seed0/step159")
    assert lines[lines.index(row) + 1].strip().startswith("branch: starts from armor_reset_never seed 0 at "
                                                           "step 159")
    cmd = lines[lines.index(row) + 2]
    for frag in ("model.path=" + str(tmp_path / "qwen25-math-7b/dapo/seed0/checkpoints/step_000140"),
                 "step_offset=140", "schedule.total_steps=240", "algo.mix.alpha=0.9375",
                 "algo.reference.reset.every=160"):
        assert frag in cmd
    mem = lines[lines.index(row) + 3]        # ranks and the per-rank memory estimate (armor.memory)
    assert mem.strip().startswith("128 ranks (16 node(s) x 8); update memory/rank ~")
    assert "context 10240 tokens" in mem and "0.6 of each GPU" in mem and " + step 3.9)" in mem  # whole-step
    late = lines[lines.index(next(l for l in lines if l.startswith("stage2/armor_late/seed0"))) + 1]
    assert "step_000200" in late and "step_offset=200" in late
    assert next(l for l in lines if l.startswith("eval/armor/seed0")).split()[2] == "1x8gpu"
    n_train = sum(1 for l in lines if l.startswith("stage") and " train " in l)
    assert n_train == len(CONTRACT_7B) - 1
    # 32 train + 9 evaluate + 2 θ* + collect, figures + fetching + 11 checkpoint-ready jobs (θ* of dapo and
    # qae, the late start; the branch points 79/119/159 and restart points 80/120/160 of armor_reset_never,
    # 149/159 of qae_armor_reset_never)
    assert "57 jobs: 0 done, 0 queued, 0 running, 57 to run" in out
    assert not tmp_path.joinpath("qwen25-math-7b").exists()  # a dry run writes nothing
    # the throughput flags: with the default, a round on 8 GPUs outlasts parallel.timeout_s and a step the
    # train job's stop grace (1800 s; test_dry_run_plan.py checks both errors)
    rc, out = _dry(["--preset", "qwen25-math-7b", "--dry-run", "--cluster", "slurm", "--root", str(tmp_path),
                    "--nodes", "2", "--gpus-per-node", "4", "--partition", "gpu", "--only", "fig2",
                    "--rollout-tokens-per-s", "20000", "--update-tokens-per-s", "40000"])
    assert rc == 0
    row = next(l for l in out.splitlines() if l.startswith("stage2/kl_k3_b1/seed0"))
    assert "2x4gpu" in row and "p=gpu" in row
    keys = [line.split()[0] for line in out.splitlines() if line.strip()]
    # no eval jobs
    assert "stage2/kl_k2_b1/seed0" not in keys and not any(k.startswith("eval/") for k in keys)


def test_dry_run_qwen3_8b_base(tmp_path):
    rc, out = _dry(["--preset", "qwen3-8b-base", "--dry-run", "--cluster", "slurm", "--root", str(tmp_path)])
    assert rc == 0
    assert "θ* of dapo: step 70 (protocol)" in out and "armor_tau1_until180 = armor" in out
    assert "items: headline, fig1, fig7, table1, table2, table3" in out
    assert "kl_k3" not in out and "qae" not in out and "mix_a" not in out
    lines = out.splitlines()
    row = next(l for l in lines if l.startswith("stage2/armor_tau1_until110/seed0"))
    assert "16x8gpu" in row and row.endswith("ckpt/armor/seed0/step110")   # τ = 1 until 180 through 110
    cmd = lines[lines.index(row) + 2]
    assert ("algo.mix.alpha=0.875" in cmd and "algo.reference.reset.until_step=110" in cmd
            and "step_offset=70" in cmd)
    assert "context 22528 tokens" in lines[lines.index(row) + 3]
    # 15 + fetching + θ*'s checkpoint-ready job + armor's branch points 110 and 180
    assert "19 jobs: 0 done, 0 queued, 0 running, 19 to run" in out


# ------------------------------------------------------------------------------------------ fake pipeline
FAKE_TRAIN = r'''
import json, math, os, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from armor.config import load_config, dump_config
a = sys.argv[1:]
cfg = load_config(a[1], a[2:])
rd = Path(cfg.output_dir); rd.mkdir(parents=True, exist_ok=True)
with open(rd / "invocations.log", "a") as f:
    f.write(" ".join(a[2:]) + "\n")
if (rd / "DONE").exists():
    sys.exit(0)
dump_config(cfg, rd / "config.yaml")
bonus = 0.1 if cfg.algo.anchor.enabled else 0.0
def val(t):  # peaks at total step 4, then collapses
    return round(0.5 + 0.3 * math.exp(-((t - 4) / 2.0) ** 2) + bonus, 6)
n = cfg.schedule.total_steps
delay = float(os.environ.get("FAKE_STEP_S", "0.02"))
with open(rd / "validation.jsonl", "w") as f:
    for s in range(0, n + 1, cfg.schedule.validate_every):
        t = cfg.step_offset + s
        f.write(json.dumps({{"step": s, "total_step": t, "benchmark": "toy_val", "metric": "avg@2", "k": 2,
                            "value": val(t), "n_problems": 16}}) + "\n")
with open(rd / "metrics.jsonl", "w") as f:
    for s in range(1, n + 1):
        time.sleep(delay)
        f.write(json.dumps({{"step": s, "reward_mean": 0.1 * s, "kl_reverse": 0.01, "kl_forward": 0.02}}) + "\n")
        if s % cfg.schedule.save_every == 0 or s == n or s in cfg.schedule.keep_steps:
            d = rd / "checkpoints" / f"step_{{s:06d}}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "config.json").write_text("{{}}")
            (d / "trainer_state.pt").write_text("")   # a checkpoint is complete once its state is written
(rd / "DONE").write_text(json.dumps({{"steps": n}}))
'''

FAKE_EVAL = r'''
import argparse, json, os
from pathlib import Path
ap = argparse.ArgumentParser()
ap.add_argument("--checkpoint"); ap.add_argument("--benchmarks"); ap.add_argument("--protocol"); ap.add_argument("--out")
a, rest = ap.parse_known_args()
assert "--preset" in rest and "--engine" in rest, rest
out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
for b in a.benchmarks.split(","):
    b = b.split("=", 1)[0]  # NAME=path.jsonl
    (out / f"{b}__{a.protocol}__k4.json").write_text(json.dumps(
        {"benchmark": b, "metrics": {"avg@4": 0.25, "pass@2": 0.5}, "samples": 4, "checkpoint": a.checkpoint}))
with open(out.parent / "invocations.log", "a") as f:
    f.write(a.checkpoint + "\n")
'''

FAKE_FIGURES = r'''
import argparse, sys
from pathlib import Path
import pandas as pd
ap = argparse.ArgumentParser()
for k in ("--results", "--out", "--preset", "--runs", "--report", "--seeds", "--command", "--only"):
    ap.add_argument(k)
ap.add_argument("--wall-time-s", type=float)
a = ap.parse_args()
df = pd.read_parquet(a.results)
out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
(out / "fig.txt").write_text(f"{len(df)} rows, only={a.only}")
Path(a.report).write_text(f"# report\nwall {a.wall_time_s}\n")
with open(out / "invocations.log", "a") as f:
    f.write("x\n")
'''

FAKE_WORLD = r'''
import json, sys
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--out") + 1])
(out / "base_model").mkdir(parents=True, exist_ok=True)
(out / "data").mkdir(parents=True, exist_ok=True)
for s in ("train", "validation", "test"):
    (out / "data" / f"{s}.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
(out / "world.json").write_text(json.dumps({"quick": "--quick" in sys.argv}))
'''

MINI = """
name: mini
device: cpu
model: {{path: {world}/base_model}}
data: {{train: {world}/data/train.jsonl}}
batch: {{prompts_per_step: 4, group_size: 4, mini_batch_prompts: 2}}
lengths: {{max_prompt: 32, max_response: 40, overlong_buffer: 8}}
schedule: {{total_steps: 6, save_every: 2, validate_every: 2}}
validation: {{benchmarks: [toy_val={world}/data/validation.jsonl], samples: 2}}
protocol:
  stage1_steps: 6
  stage2_steps: 4
  peak_selection_window: 1
  late_start_step: 6
  armor_alpha: 0.875
  armor_ref_n: 2
  armor_reset_every: 2
  reset_sweep: [2, 4]
  qae_reset_sweep: [2]
  eval_benchmarks: [toy_test={world}/data/test.jsonl]
  eval_protocol: toy
  seeds: [0]
"""


def _mini_preset(tmp_path, name="mini", text=MINI):
    """presets/<name>.yaml under tmp_path: `text` (MINI or an edit of it) with its world in tmp_path/world."""
    f = tmp_path / "presets" / f"{name}.yaml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text.format(world=tmp_path / "world"))
    return f


def _fakes(tmp_path, monkeypatch):
    d = tmp_path / "fakes"
    d.mkdir(exist_ok=True)
    for name, text in (("train.py", FAKE_TRAIN.format(repo=str(REPO))), ("evaluate.py", FAKE_EVAL),
                       ("figures.py", FAKE_FIGURES), ("world.py", FAKE_WORLD)):
        (d / name).write_text(text)
    table = {"armor.train": [PY, str(d / "train.py")], "eval.evaluate": [PY, str(d / "evaluate.py")],
             "figures": [PY, str(d / "figures.py")], "reproduce.toy.build": [PY, str(d / "world.py")]}
    monkeypatch.setenv("ARMOR_REPRO_ENTRYPOINTS", json.dumps(table))
    return table


def _invocations(root):
    return {str(p.relative_to(root)): p.read_text() for p in Path(root).rglob("invocations.log")}


def test_pipeline_with_fake_jobs_is_idempotent(tmp_path, monkeypatch):
    _fakes(tmp_path, monkeypatch)
    preset = _mini_preset(tmp_path)
    root = tmp_path / "runs"
    argv = ["--preset", str(preset), "--cluster", "local", "--root", str(root), "--workers", "2",
            "--no-progress"]
    rc, out = _dry(argv)
    assert rc == 0, out
    assert "all" in out and "jobs done" in out
    pr = root / "mini"
    df = pd.read_parquet(pr / "results.parquet")
    assert list(df.columns) == RESULT_COLUMNS
    assert set(df["preset"]) == {"mini"} and set(df["source"]) == {"validation", "eval"}
    arms = build_arms(load_preset(preset))
    assert set(df["arm"]) == set(arms)  # aliases included (armor_reset_2 = armor)
    peak = json.loads((pr / "dapo" / "seed0" / "peak.json").read_text())
    assert peak["step"] == 4 and peak["method"] == "argmax"  # the fake curve peaks at 4
    armor_val = df[(df.arm == "armor") & (df.source == "validation")]
    assert sorted(armor_val["step"]) == [4, 6, 8]  # stage-2 steps 0, 2, 4 + θ*'s step 4
    late = df[(df.arm == "armor_late") & (df.source == "validation")]
    assert sorted(late["step"]) == [6, 8, 10]
    ev = df[df.source == "eval"]
    assert set(ev["arm"]) == {"dapo", "qae", "armor", "armor_reset_2", "qae_armor_reset_never",
                              "qae_armor_reset_2", "opd", "mopd"}  # armor_reset_2 is armor's run
    dapo_ev = ev[ev.arm == "dapo"]
    assert set(dapo_ev["step"]) == {4} and set(dapo_ev["metric"]) == {"avg@4", "pass@2"}
    assert set(dapo_ev["benchmark"]) == {"toy_test"} and set(dapo_ev["n"]) == {4}
    assert (pr / "armor_reset_2" / "seed0").is_symlink()
    assert (pr / "armor_reset_2" / "seed0" / "DONE").exists()
    assert (pr / "figures" / "fig.txt").exists() and (pr / "REPRODUCTION.md").exists()
    wall = float((pr / "REPRODUCTION.md").read_text().split("wall ")[1])   # the driver's time, passed on
    assert 0 < wall < 600
    assert json.loads((tmp_path / "world" / "world.json").read_text()) == {"quick": False}
    meta = json.loads((pr / "results.meta.json").read_text())
    assert meta["peaks"]["dapo"]["0"] == 4 and meta["aliases"]["armor_reset_2"] == "armor"
    assert meta["figure_arms"] == figure_arms(load_preset(preset).protocol)   # what figures/ reads back
    assert meta["figure_panels"] == figure_panels(load_preset(preset).protocol)
    # every stage-2 arm started from θ* with πref = θ*
    cfg = load_config(pr / "armor" / "seed0" / "config.yaml")
    assert cfg.model.path == cfg.algo.reference.path == peak["checkpoint"] and cfg.step_offset == 4
    before = _invocations(tmp_path)
    mtime = (pr / "results.parquet").stat().st_mtime_ns
    # a second invocation right after: nothing runs
    rc, out = _dry(argv)
    assert rc == 0 and "nothing to do" in out
    assert _invocations(tmp_path) == before and (pr / "results.parquet").stat().st_mtime_ns == mtime
    rc, out = _dry(argv + ["--status"])
    assert rc == 0 and "0 to run" in out and "todo" not in out
    # a figure subset redraws only the figures
    rc, out = _dry(argv + ["--only", "fig4"])
    assert rc == 0
    after = _invocations(tmp_path)
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {"runs/mini/figures/invocations.log"}
    assert "only=fig4" in (pr / "figures" / "fig.txt").read_text()


DRIVER_ARGS = ["--cluster", "local", "--workers", "2", "--no-progress"]


def test_pipeline_continues_dapo_late_from_dapo_conts_run(tmp_path, monkeypatch):
    """With a fixed θ* (step 4) both DAPO controls are continuations, chained by their end: dapo_cont
    continues dapo (to step 8), dapo_late continues dapo_cont's folder from its last checkpoint (to 10)."""
    _fakes(tmp_path, monkeypatch)
    preset = _mini_preset(tmp_path, "chain", MINI.replace("  stage2_steps: 4\n",
                                                           "  stage2_steps: 4\n  peak_step: 4\n"
                                                           "  kl_betas: [0.01]\n"))
    root = tmp_path / "runs"
    rc, out = _dry(["--preset", str(preset), "--cluster", "local", "--root", str(root), "--workers", "2",
                    "--no-progress", "--only", "fig2,fig3"])
    assert rc == 0, out
    late = root / "chain" / "dapo_late" / "seed0"
    info = json.loads((late / "branch.json").read_text())
    assert info["source"].endswith("dapo_cont/seed0") and info["checkpoints"] == [8]
    assert "schedule.total_steps=10" in (late / "invocations.log").read_text()
    cont = json.loads((root / "chain" / "dapo_cont" / "seed0" / "branch.json").read_text())
    assert cont["source"].endswith("dapo/seed0") and cont["checkpoints"] == [6]


@pytest.mark.slow      # a SIGKILLed driver; a second invocation submitting nothing: ..._is_idempotent
def test_pipeline_killed_driver_resumes(tmp_path, monkeypatch, wait_until):
    _fakes(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_STEP_S", "0.3")
    preset = _mini_preset(tmp_path)
    root = tmp_path / "runs"
    cmd = [PY, str(REPO / "reproduce" / "run_all.py"), "--preset", str(preset), "--root", str(root),
           "--only", "fig4", *DRIVER_ARGS]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    peak = root / "mini" / "dapo" / "seed0" / "peak.json"
    wait_until((root / "mini" / "armor" / "seed0" / "metrics.jsonl").exists, "a stage-2 job's first metrics",
               p)
    assert peak.exists(), "the driver did not reach stage 2"
    p.send_signal(signal.SIGKILL)
    p.wait()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    # a stage-2 job still running when the driver died is adopted ("[adopt]"), or it finished meanwhile;
    # either way nothing is trained twice:
    inv = _invocations(root)
    for arm in ("dapo", "armor", "armor_reset_never", "armor_reset_4"):
        assert len(inv[f"mini/{arm}/seed0/invocations.log"].splitlines()) == 1, arm  # each trained once
    df = pd.read_parquet(root / "mini" / "results.parquet")
    assert {"dapo", "armor", "armor_reset_never", "armor_reset_2", "armor_reset_4"} == set(df["arm"])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path))
    assert "nothing to do" in out.stdout


@pytest.mark.slurm
@pytest.mark.slow      # the driver's DAG through the real SLURM runs for real: test_run_all_smoke.py
def test_pipeline_with_fake_jobs_on_slurm(slurm_cluster, tmp_path, monkeypatch):
    _fakes(tmp_path, monkeypatch)
    preset = _mini_preset(tmp_path)
    root = tmp_path / "runs"
    argv = ["--preset", str(preset), "--cluster", "slurm", "--root", str(root), "--only", "fig4",
            "--no-progress", "--poll", "0.5"]
    rc, out = _dry(argv)
    assert rc == 0, out
    assert "[submit] stage2/armor/seed0 -> slurm" in out and "after" in out
    df = pd.read_parquet(root / "mini" / "results.parquet")
    assert set(df["arm"]) == {"dapo", "armor", "armor_reset_never", "armor_reset_2", "armor_reset_4"}
    reg = json.loads((root / "mini" / "_jobs" / "state.json").read_text())
    assert all(r["backend"] == "slurm" and r["state"] == "done" for r in reg.values())
    rc, out = _dry(argv)
    assert rc == 0 and "nothing to do" in out and "[submit]" not in out


def test_collect_only_reads_and_link_aliases_makes_the_alias_folders(tmp_path):
    p = load_preset(_mini_preset(tmp_path))
    root = tmp_path / "runs"
    canon, link = run_dir(root, p, "armor", 0), run_dir(root, p, "armor_reset_2", 0)   # armor_reset_2 = armor
    canon.mkdir(parents=True)
    collect(p, root, [0])
    assert not link.exists() and not link.is_symlink()                     # collecting writes no run folder
    assert link_aliases(p, root, [0]) == [link]                            # only aliases whose run exists
    assert link.is_symlink() and os.readlink(link) == "../armor/seed0" and link.resolve() == canon.resolve()
    assert link_aliases(p, root, [0]) == []                                # idempotent


def test_eval_samples_too_few_for_the_protocols_pass_k_fails_at_plan_time(tmp_path):
    p = tmp_path / "few.yaml"
    p.write_text(f"base: {PRESETS_DIR / 'smoke.yaml'}\nprotocol: {{eval_samples: 2}}\n")
    with pytest.raises(ExperimentError, match=r"protocol.eval_samples=2: .*'toy'.*pass@4"):
        load_preset(p)
    p.write_text(f"base: {PRESETS_DIR / 'smoke.yaml'}\nprotocol: {{eval_samples: 4}}\n")
    assert load_preset(p).protocol.eval_samples == 4


def test_driver_wall_time_sums_invocations_and_the_running_one(tmp_path, monkeypatch):
    monkeypatch.delenv(DRIVER_START_ENV, raising=False)
    assert driver_wall_time(tmp_path) is None                 # figures drawn outside the driver
    record_driver_run(tmp_path, 100.0, 160.0)
    record_driver_run(tmp_path, 200.0, 230.5)
    assert driver_wall_time(tmp_path) == pytest.approx(90.5)
    monkeypatch.setenv(DRIVER_START_ENV, "1000.0")
    assert driver_wall_time(tmp_path, now=1012.0) == pytest.approx(102.5)

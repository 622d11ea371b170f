"""The authors' reset (armor_restart: a new run from armor_reset_never's best checkpoint, πref = it, a fresh
optimizer and warm-up, for the rest of stage 2), seeds per arm (side arms, selection seeds), and the tiny
presets' matrix (reproduce/matrix/arms.py, reproduce/jobs/peaks.py, reproduce/dag/graph.py)."""
import dataclasses
import json
import re

import pytest

from armor.config import load_config
from reproduce.jobs import cli
from reproduce.matrix.arms import arm_definitions, arm_seeds, build_arms, figure_arms, selection_seeds
from reproduce.matrix.overrides import train_overrides
from reproduce.dag.graph import build_jobs
from reproduce.jobs.peaks import choose_restart, restart_file, start_point
from reproduce.matrix.presets import ExperimentError, load_preset, run_dir

from test_experiments import MINI, _mini_preset
from test_seeds_and_late_start import _fake_run

THREE = MINI.replace("  seeds: [0]\n", "  seeds: [0, 1, 2]\n  selection_seeds: [0, 1]\n"
                                       "  side_arms: [anchor_only]\n  side_arm_seeds: 2\n  single_seed_arms: "
                                       "[qae, qae_cont, qae_armor_reset_never, qae_armor_reset_2]\n"
                     ).replace("  reset_sweep: [2, 4]\n", "  reset_sweep: [2, 4]\n  restart_within: 0.5\n"
                               "  stage2_warmup_steps: 1\n"
                               ).replace("  stage2_steps: 4\n", "  stage2_steps: 8\n")


def _preset(tmp_path, text=THREE):
    return _mini_preset(tmp_path, "three", text)


def test_choose_restart_by_hand():
    """argmax of the (smoothed) curve among checkpoints at stage-2 steps in (0, last]; ties: the earliest."""
    curve = [(0, 0.5), (2, 0.6), (4, 0.7), (6, 0.9), (8, 0.2)]
    ck = [0, 2, 4, 6, 8]
    assert choose_restart(curve, ck, 4)["step"] == 4              # 6 lies beyond the window
    assert choose_restart(curve, ck, 6)["step"] == 6
    assert choose_restart(curve, [0, 2, 6], 4)["step"] == 2       # 4 has no checkpoint
    # never θ* itself; a tie -> the earliest
    assert choose_restart([(0, 0.9), (2, 0.3), (4, 0.3)], ck, 4)["step"] == 2
    # smoothed over 3: [.55, .6, .733, .6, .55] -> 4
    assert choose_restart(curve, ck, 8, window=3)["step"] == 4
    with pytest.raises(ExperimentError, match=r"no checkpoint of armor_reset_never at a stage-2 step in "
                                              r"\(0, 4\]"):
        choose_restart(curve, [0, 6, 8], 4)


def test_seeds_per_arm_and_the_selection_seeds(tmp_path):
    p = load_preset(_preset(tmp_path)).protocol
    arms = arm_definitions(p)
    assert arm_seeds(p, arms["armor"], p.seeds) == [0, 1, 2]
    assert arm_seeds(p, arms["anchor_only"], p.seeds) == [0, 1]           # side arm: side_arm_seeds
    assert arm_seeds(p, arms["qae_cont"], p.seeds) == [0]                 # single-seed arm
    assert arm_seeds(p, arms["armor_reset_4"], p.seeds) == [0, 1, 2]      # alias of armor: follows it
    assert arm_seeds(p, arms["anchor_only"], [0]) == [0]                  # --seeds 0
    assert selection_seeds(p, [0, 1, 2]) == [0, 1] and selection_seeds(p, [2]) == [2]
    assert selection_seeds(dataclasses.replace(p, selection_seeds=[]), [0, 1, 2]) == [0, 1, 2]


def test_the_restart_arm_its_jobs_and_fig4(tmp_path):
    f = _preset(tmp_path)
    p, root = load_preset(f), tmp_path / "runs"
    arms = build_arms(p)
    r = arms["armor_restart"]
    assert r.stage == 2 and r.start == "restart" and not r.alias_of and "fig4" in r.figures
    assert figure_arms(p.protocol)["fig4"][-1] == "armor_restart"
    o = dict(x.split("=", 1) for x in r.overrides)
    assert o["algo.reference.reset.every"] == "null" and "optim.warmup_steps" not in o   # every stage 2's
    assert o["algo.anchor.enabled"] == "true" and o["algo.mix.variant"] == "mixed"
    jobs = {j.key: j for j in build_jobs(p, root)}
    for s in (0, 1, 2):
        assert jobs[f"stage2/armor_restart/seed{s}"].deps == [f"restart/armor_reset_never/seed{s}"]
        # the restart point from the selection seeds' finished runs (and this seed's own, for its checkpoint)
        assert set(jobs[f"restart/armor_reset_never/seed{s}"].deps) == {f"stage2/armor_reset_never/seed{x}"
                                                                       for x in {0, 1, s}}
        assert set(jobs[f"peak/dapo/seed{s}"].deps) == {f"stage1/dapo/seed{x}" for x in {0, 1, s}}
        assert "--seeds" in jobs[f"peak/dapo/seed{s}"].argv and "0,1" in jobs[f"peak/dapo/seed{s}"].argv
    assert "stage2/anchor_only/seed2" not in jobs and "stage2/anchor_only/seed1" in jobs
    # armor_reset_never, which the restart waits for, trains before the rest of stage 2, every seed
    order = [k for k in jobs if k.startswith("stage2/")]
    assert order[:3] == [f"stage2/armor_reset_never/seed{s}" for s in (0, 1, 2)]
    # without restart_within: no such arm, no restart jobs
    p0 = load_preset(_preset(tmp_path, THREE.replace("  restart_within: 0.5\n", "")))
    assert "armor_restart" not in build_arms(p0) and not any(k.startswith("restart/") for k in
                                                              (j.key for j in build_jobs(p0, root)))


def test_select_restart_writes_the_point_and_the_restart_config_reads_it(tmp_path, capsys):
    """restart.json: the argmax of armor_reset_never's selection-seed mean curve within the first half of
    stage 2; armor_restart then starts there: model.path = algo.reference.path = that seed's checkpoint
    (πref = it), a new run folder (fresh optimizer), warm-up, step_offset θ* + r, stage2_steps − r steps."""
    f = _preset(tmp_path)
    p, root = load_preset(f), tmp_path / "runs"
    ck = [0, 2, 4, 6, 8]
    curves = {0: [(0, 0.5), (2, 0.7), (4, 0.6), (6, 0.9), (8, 0.4)],     # mean of 0, 1: .5 .55 .65 .8 .35
              1: [(0, 0.5), (2, 0.4), (4, 0.7), (6, 0.7), (8, 0.3)],     # within r <= 4: argmax 4
              2: [(0, 0.5), (2, 0.9), (4, 0.1), (6, 0.1), (8, 0.1)]}     # not a selection seed: ignored
    for s, c in curves.items():
        run = run_dir(root, p, "armor_reset_never", s)
        _fake_run(run, c, ck)
        (run / "DONE").write_text("")
        dapo = run_dir(root, p, "dapo", s)
        dapo.mkdir(parents=True, exist_ok=True)
        (dapo / "peak.json").write_text(json.dumps({"step": 6, "checkpoint": str(dapo / "checkpoints/x")}))
    for s in (0, 1, 2):
        rc = cli.main(["select-restart", "--preset", str(f), "--root", str(root), "--seed", str(s)])
        assert rc == 0
    assert "stage-2 step 4 (total 10, mean of seeds [0, 1])" in capsys.readouterr().out
    arm = arm_definitions(p.protocol)["armor_restart"]
    for s in (0, 1, 2):
        rs = json.loads(restart_file(root, p, s).read_text())
        src = str(run_dir(root, p, "armor_reset_never", s) / "checkpoints" / "step_000004")
        assert (rs["stage2_step"], rs["step"], rs["remaining"], rs["checkpoint"]) == (4, 10, 4, src)
        start = start_point(p, root, arm, s)
        assert start == {"step": 10, "checkpoint": src, "stage2_step": 4}
        o = train_overrides(p, root, arm, s, start)
        kv = dict(x.split("=", 1) for x in o)
        assert kv["model.path"] == kv["algo.reference.path"] == src
        assert (kv["step_offset"], kv["schedule.total_steps"], kv["optim.warmup_steps"]) == ("10", "4", "1")
        # its own run folder: a fresh optimizer
        assert kv["output_dir"] == str(run_dir(root, p, "armor_restart", s))
        cfg = load_config(f, o)
        assert cfg.algo.reference.reset.every is None and cfg.optim.warmup_steps == 1
    # a selection seed not finished: no restart point yet
    (run_dir(root, p, "armor_reset_never", 1) / "DONE").unlink()
    rc = cli.main(["select-restart", "--preset", str(f), "--root", str(root), "--seed", "0"])
    assert rc == 2 and "seed(s) [1] are not DONE" in capsys.readouterr().err


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("  reset_sweep: [2, 4]\n", ""),
     r"protocol.restart_within: 0.5 needs protocol.reset_sweep"),
    (lambda t: t.replace("restart_within: 0.5", "restart_within: 1.5"),
     r"protocol.restart_within: 1.5 must be in"),
    (lambda t: t.replace("restart_within: 0.5", "restart_within: 0.1"),
     r"protocol.restart_within=0.1: the first 0 of 8 stage-2 steps hold no validation"),
    (lambda t: t.replace("side_arms: [anchor_only]", "side_arms: [anchor_only, qae]"),
     r"protocol.side_arms: .* names arms of protocol.single_seed_arms too: \['qae'\]"),
    (lambda t: t.replace("side_arms: [anchor_only]", "side_arms: [armor_reset_never]"),
     r"'armor_restart' runs seed\(s\) \[2\], which 'armor_reset_never', the run it starts from, does not "
     r"run"),
    (lambda t: t.replace("side_arms: [anchor_only]", "side_arms: [anchro_only]"),
     r"protocol.side_arms: \['anchro_only'\] are not arms"),
    (lambda t: t.replace("selection_seeds: [0, 1]", "selection_seeds: [0, 5]"),
     r"protocol.selection_seeds: \[0, 5\] must be seeds of protocol.seeds"),
    (lambda t: t.replace("side_arm_seeds: 2", "side_arm_seeds: 0"),
     r"protocol.side_arm_seeds: 0 must be >= 1"),
    (lambda t: t.replace("stage2_warmup_steps: 1", "stage2_warmup_steps: -1"),
     r"protocol.stage2_warmup_steps: -1 must be >= 0"),
])
def test_bad_restart_and_seed_settings_fail_before_any_work(tmp_path, edit, message):
    with pytest.raises(Exception, match=message):
        build_jobs(load_preset(_preset(tmp_path, edit(THREE))), tmp_path / "runs")


HEADLINE = {"dapo", "dapo_cont", "armor", "anchor_only", "armor_reset_never", "armor_reset_20",
            "armor_reset_40", "armor_restart", "kl_k3_b1"}


def test_the_tiny_preset_runs_5_seeds_for_the_headline_arms_and_3_for_the_cited_side_arms():
    """OPD runs one seed: its weights are θ*'s (its teacher is its start)."""
    p = load_preset("tiny")
    pr = p.protocol
    arms = build_arms(p)
    seeds = {n: arm_seeds(pr, a, pr.seeds) for n, a in arms.items()}
    assert pr.seeds == [0, 1, 2, 3, 4] and pr.selection_seeds == [0, 1, 2]
    assert {n for n, s in seeds.items() if len(s) == 5} == HEADLINE
    assert {n for n, s in seeds.items() if len(s) == 3} == {"kl_k3_b1e-2", "mix_a0.8", "mopd"}
    assert all(len(s) == 1 for n, s in seeds.items() if n not in HEADLINE | set(pr.side_arms))
    assert "armor_restart" in figure_arms(pr)["fig4"] and arms["armor_restart"].start == "restart"
    assert int(pr.restart_within * pr.stage2_steps) == 40        # restart points: stage-2 steps 10 to 40


def test_adding_seeds_and_the_restart_changes_no_run_of_the_3_seed_tiny(tmp_path):
    """Every train and select-peak job of the 3-seed protocol (seeds 0-2, no restart arm) is in the 5-seed
    plan with the same command: seeds 3-4 and armor_restart only add jobs (θ* is chosen on the same seeds)."""
    p = load_preset("tiny")
    old = dataclasses.replace(p, protocol=dataclasses.replace(
        p.protocol, seeds=[0, 1, 2], restart_within=None, side_arms=[], selection_seeds=[],
        headline_arm="armor"))     # no restart arm: Table 1's +ARMOR was the in-run reset
    root = tmp_path / "runs"
    new_jobs = {j.key: j for j in build_jobs(p, root)}
    old_jobs = [j for j in build_jobs(old, root) if j.kind in ("train", "select_peak")]
    assert len(old_jobs) >= 40
    for j in old_jobs:
        assert new_jobs[j.key].argv == j.argv and new_jobs[j.key].deps == j.deps, j.key
    start = {"step": 15, "checkpoint": "x"}
    for name, arm in arm_definitions(old.protocol).items():
        if arm.stage == 2:
            assert train_overrides(p, root, arm, 0, start) == train_overrides(old, root, arm, 0, start), name


def test_tiny_v2_keeps_its_committed_protocol():
    pr = load_preset("tiny-v2").protocol
    arms = build_arms(load_preset("tiny-v2"))
    assert pr.seeds == [0, 1, 2] and "armor_restart" not in arms and "fig5" in figure_arms(pr)
    assert "fig7" in figure_arms(pr) and "fig6" in figure_arms(pr)
    assert {f for f in ("fig5", "fig6", "fig7") if f in figure_arms(load_preset("tiny").protocol)} == set()


def test_tiny_slow_is_tiny_with_a_slower_stage2_clock(tmp_path):
    """protocol.stage2_overrides reach every stage-2 run and no stage-1 run; every run's config validates."""
    slow, tiny = load_preset("tiny-slow"), load_preset("tiny")
    assert slow.protocol.stage2_overrides == ["batch.epochs=1"]
    assert slow.cfg.batch.epochs == tiny.cfg.batch.epochs == 4
    root, start = tmp_path / "runs", {"step": 15, "checkpoint": "x"}
    arms = build_arms(slow)
    assert set(arms) == set(build_arms(tiny))
    for name, arm in arms.items():
        o = train_overrides(slow, root, arm, 0, start if arm.stage == 2 else None)
        cfg = load_config(slow.path, o)
        assert cfg.batch.epochs == (1 if arm.stage == 2 else 4), name
        t = train_overrides(tiny, root, arm, 0, start if arm.stage == 2 else None)
        assert [x.replace("tiny-slow", "tiny") for x in o if x != "batch.epochs=1"] == t, name
    with pytest.raises(Exception, match="batch.epochs"):
        load_preset(_preset(tmp_path, THREE.replace(
            "  stage2_steps: 8\n", "  stage2_steps: 8\n  stage2_overrides: [batch.epochs=0]\n")))


# the pieces in the default suite: the restart arm's jobs and their deps
# (test_the_restart_arm_its_jobs_and_fig4), the point select-restart writes and the config armor_restart reads
# from it (test_select_restart_...), the driver running a fake-job DAG to its results
# (test_experiments.py::test_pipeline_with_fake_jobs_is_idempotent), its wall-time line (test_the_wall_time_*)
@pytest.mark.slow
def test_the_driver_runs_the_restart_arm_end_to_end_with_fake_jobs(tmp_path, monkeypatch):
    """run_all with fake train/eval/figures entry points: armor_reset_never's runs, the restart point, then
    armor_restart from that checkpoint (πref = it, warm-up, the rest of stage 2), its rows in the results; the
    driver prints its wall time at the end."""
    import pandas as pd
    from test_experiments import _dry, _fakes
    _fakes(tmp_path, monkeypatch)
    f = _preset(tmp_path, THREE.replace("  seeds: [0, 1, 2]\n", "  seeds: [0, 1]\n").replace(
        "  side_arms: [anchor_only]\n  side_arm_seeds: 2\n", ""))
    root = tmp_path / "runs"
    rc, out = _dry(["--preset", str(f), "--cluster", "local", "--root", str(root), "--workers", "2",
                    "--no-progress"])
    assert rc == 0, out
    assert re.search(r"\nwall time of this command: \d+h \d\dm \d\ds \(\d+ s\)\n", out) and "jobs done" in out
    pr = root / "three"
    for s in (0, 1):
        rs = json.loads((pr / "armor_reset_never" / f"seed{s}" / "restart.json").read_text())
        # the fake curve (total steps) peaks at 4 = θ*, so within stage-2 steps (0, 4] the best is r = 2
        assert rs["stage2_step"] == 2 and rs["step"] == 6 and rs["seeds"] == [0, 1]
        cfg = load_config(pr / "armor_restart" / f"seed{s}" / "config.yaml")
        assert cfg.model.path == cfg.algo.reference.path == rs["checkpoint"]
        assert cfg.step_offset == 6 and cfg.schedule.total_steps == 6 and cfg.optim.warmup_steps == 1
        assert cfg.algo.reference.reset.every is None and cfg.algo.anchor.enabled
    df = pd.read_parquet(pr / "results.parquet")
    v = df[(df.arm == "armor_restart") & (df.source == "validation")]
    assert sorted(set(v["step"])) == [6, 8, 10, 12] and set(v["seed"]) == {0, 1}   # ends where stage 2 ends
    never = df[(df.arm == "armor_reset_never") & (df.source == "validation")]
    assert max(never["step"]) == 12


def test_the_wall_time_line_the_driver_prints(tmp_path, monkeypatch):
    from reproduce.jobs.figures import DRIVER_START_ENV, record_driver_run
    from reproduce.run_all import wall_time_line
    monkeypatch.delenv(DRIVER_START_ENV, raising=False)
    record_driver_run(tmp_path, 200.0, 3861.4)                  # this invocation, recorded before the line
    assert wall_time_line(tmp_path, 200.0, 3861.4) == "wall time of this command: 1h 01m 01s (3661 s)"
    record_driver_run(tmp_path, 0.0, 100.0)                      # an interrupted one before it
    assert wall_time_line(tmp_path, 200.0, 3861.4) == (
        f"wall time of this command: 1h 01m 01s (3661 s); all run_all invocations on {tmp_path}: 1h 02m 41s "
        f"(3761 s)")


def test_with_keep_last_armor_reset_never_keeps_every_candidate_restart_point(tmp_path):
    """schedule.keep_last prunes checkpoints; the restart point is chosen after armor_reset_never ends, so
    that run keeps every validated step of the window (reproduce/matrix/retention.py)."""
    text = THREE.replace("save_every: 2, validate_every: 2}}",
                         "save_every: 2, validate_every: 2, keep_last: 1}}")
    text = text.replace("  late_start_step: 6\n",
                        "  late_start_step: 6\n  peak_step: 4\n  qae_peak_step: 4\n")
    p = load_preset(_preset(tmp_path, text))
    assert p.cfg.schedule.keep_last == 1
    arms = arm_definitions(p.protocol)
    start = {"step": 4, "checkpoint": "x"}
    never = dict(o.split("=", 1) for o in train_overrides(p, tmp_path, arms["armor_reset_never"], 0, start))
    assert never["schedule.keep_steps"] == "[2,4]"    # stage 2: 8 steps, restart_within 0.5, validated: 2, 4
    other = dict(o.split("=", 1) for o in train_overrides(p, tmp_path, arms["armor"], 0, start))
    assert "schedule.keep_steps" not in other
    # without keep_last nothing is pruned and nothing is passed (tiny: its runs unchanged)
    p0 = load_preset(_preset(tmp_path))
    assert not any(o.startswith("schedule.keep_steps") for o in
                   train_overrides(p0, tmp_path, arm_definitions(p0.protocol)["armor_reset_never"], 0, start))

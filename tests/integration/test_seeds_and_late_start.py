"""Seeds as an axis of the matrix (one θ* from the seed-mean curve, single-seed arms) and the late start
chosen by rule from stage-1 validation (reproduce/jobs/peaks.py, reproduce/dag/graph.py)."""
import json

import pytest

from reproduce.jobs import cli
from reproduce.matrix.arms import arm_definitions, arm_seeds, build_arms
from reproduce.matrix.overrides import train_overrides
from reproduce.dag.graph import build_jobs
from reproduce.jobs.peaks import choose_late, mean_curve, start_point
from reproduce.matrix.presets import ExperimentError, load_preset, run_dir

from test_experiments import MINI, _mini_preset

TWO_SEEDS = MINI.replace("  late_start_step: 6\n", "  late_start_fraction: 0.5\n").replace(
    "  seeds: [0]\n",
    "  seeds: [0, 1]\n  single_seed_arms: [qae, qae_cont, qae_armor_reset_never, qae_armor_reset_2]\n")


def _preset(tmp_path, text=TWO_SEEDS):
    return _mini_preset(tmp_path, "two", text)


def _fake_run(run, curve, checkpoints, done=True):
    """A run folder with a validation curve and checkpoints; `done`: it finished (DONE, the last step's)."""
    run.mkdir(parents=True, exist_ok=True)
    if done:
        (run / "DONE").write_text(json.dumps({"steps": max(s for s, _ in curve)}))
    with open(run / "validation.jsonl", "w") as f:
        for s, v in curve:
            f.write(json.dumps({"step": s, "benchmark": "toy_val", "metric": "avg@2", "k": 2, "value": v})
                    + "\n")
    for s in checkpoints:
        (run / "checkpoints" / f"step_{s:06d}").mkdir(parents=True, exist_ok=True)
        (run / "checkpoints" / f"step_{s:06d}" / "trainer_state.pt").write_text("")


def test_mean_curve_keeps_steps_of_every_seed():
    a = [(0, 0.2), (2, 0.6), (4, 0.4)]
    b = [(0, 0.4), (2, 0.2), (4, 0.8), (6, 0.1)]
    assert mean_curve([a, b]) == [(0, pytest.approx(0.3)), (2, pytest.approx(0.4)), (4, pytest.approx(0.6))]
    assert mean_curve([a]) == a and mean_curve([]) == []


def test_choose_late_by_hand():
    curve = [(0, 0.3), (10, 0.7), (20, 0.65), (30, 0.5), (40, 0.3), (50, 0.35)]
    ck = [0, 10, 20, 30, 40, 50]
    # peak 0.7 at 10, floor 0.3 after it: f = 0.5 -> threshold 0.5 -> first step after 10 with v <= 0.5 is 30
    late = choose_late(curve, ck, 10, 0.5)
    assert late["step"] == 30 and late["threshold"] == pytest.approx(0.5) and late["floor"] == 0.3
    assert choose_late(curve, ck, 10, 0.1)["step"] == 20           # threshold 0.66: 0.65 qualifies
    assert choose_late(curve, [0, 10, 20, 40, 50], 10, 0.5)["step"] == 40   # 30 has no checkpoint
    assert choose_late(curve, ck, 10, 0.9)["step"] == 40
    # smoothed over 3 points: [.5, .55, .617, .483, .383, .325]; peak at 20 -> floor .325, f .5 -> .471 -> 40
    assert choose_late(curve, ck, 20, 0.5, window=3)["step"] == 40
    with pytest.raises(ExperimentError, match="never falls"):
        choose_late([(0, 0.3), (10, 0.7), (20, 0.8)], ck, 10, 0.5)
    with pytest.raises(ExperimentError, match="no validation after"):
        choose_late(curve, ck, 50, 0.5)
    with pytest.raises(ExperimentError, match="no checkpoint after"):
        choose_late(curve, [0, 10, 20], 10, 0.5)


def test_one_peak_from_the_seed_mean_and_the_late_start_in_peak_json(tmp_path, capsys):
    f = _preset(tmp_path)
    p, root = load_preset(f), tmp_path / "runs"
    ck = [2, 4, 6]
    _fake_run(run_dir(root, p, "dapo", 0), [(0, 0.3), (2, 0.6), (4, 0.5), (6, 0.2)], ck)
    _fake_run(run_dir(root, p, "dapo", 1), [(0, 0.3), (2, 0.4), (4, 0.7), (6, 0.3)], ck)
    # seed 1 alone peaks at 4; the mean (.3, .5, .6, .25) peaks at 4 too, seed 0 alone at 2
    for s in (0, 1):
        assert cli.main(["select-peak", "--preset", str(f), "--root", str(root), "--arm", "dapo",
                         "--seed", str(s), "--late"]) == 0
    out = capsys.readouterr().out
    assert "mean of seeds [0, 1]" in out and "late start of dapo seed 0: step 6" in out
    for s in (0, 1):
        pk = json.loads((run_dir(root, p, "dapo", s) / "peak.json").read_text())
        assert pk["step"] == 4 and pk["seeds"] == [0, 1] and pk["method"] == "argmax"
        # peak .6, floor .25 -> threshold .425 at f = .5 -> step 6, this seed's checkpoint
        assert pk["late"]["step"] == 6 and pk["late"]["checkpoint"] == str(run_dir(root, p, "dapo", s) /
                                                                           "checkpoints" / "step_000006")
        late_arm = arm_definitions(p.protocol)["armor_late"]
        assert start_point(p, root, late_arm, s) == {"step": 6, "checkpoint": pk["late"]["checkpoint"]}
    # a seed alone (the --seeds override) picks its own argmax
    assert cli.main(["select-peak", "--preset", str(f), "--root", str(root), "--arm", "dapo",
                             "--seed", "0", "--seeds", "0"]) == 0
    assert json.loads((run_dir(root, p, "dapo", 0) / "peak.json").read_text())["step"] == 2


def test_a_run_that_never_degrades_has_no_late_start_and_the_late_arm_says_so(tmp_path, capsys):
    f = _preset(tmp_path)
    p, root = load_preset(f), tmp_path / "runs"
    for s in (0, 1):
        _fake_run(run_dir(root, p, "dapo", s), [(0, 0.3), (2, 0.5), (4, 0.6), (6, 0.6)], [2, 4, 6])
    for s in (0, 1):
        assert cli.main(["select-peak", "--preset", str(f), "--root", str(root), "--arm", "dapo",
                         "--seed", str(s), "--late"]) == 0
    assert "late start of dapo seed 1: none" in capsys.readouterr().out
    rc = cli.main(["train", "--preset", str(f), "--root", str(root), "--arm", "armor_late",
                           "--seed", "0"])
    assert rc == 2 and ("armor_late seed 0: no late start: validation never falls below θ*'s 0.6000 after "
                        "step 4" in capsys.readouterr().err)


def test_peak_selection_over_seeds_needs_every_seed(tmp_path, capsys):
    f = _preset(tmp_path)
    p, root = load_preset(f), tmp_path / "runs"
    _fake_run(run_dir(root, p, "dapo", 0), [(0, 0.3), (2, 0.6)], [2])
    rc = cli.main(["select-peak", "--preset", str(f), "--root", str(root), "--arm", "dapo",
                           "--seed", "0"])
    assert rc == 2 and "seed(s) [1] have no validation yet" in capsys.readouterr().err
    rc = cli.main(["select-peak", "--preset", str(f), "--root", str(root), "--arm", "armor",
                           "--seed", "0"])
    assert rc == 2 and "not a stage-1 baseline" in capsys.readouterr().err


def test_jobs_run_single_seed_arms_once_and_wait_for_every_seed_before_the_peak(tmp_path):
    p = load_preset(_preset(tmp_path))
    jobs = {j.key: j for j in build_jobs(p, tmp_path / "runs")}
    assert "stage1/dapo/seed1" in jobs and "stage2/armor/seed1" in jobs and "stage2/armor_late/seed1" in jobs
    assert ("stage1/qae/seed0" in jobs and "stage1/qae/seed1" not in jobs
            and "stage2/qae_cont/seed1" not in jobs)
    assert set(jobs["peak/dapo/seed1"].deps) == {"stage1/dapo/seed0", "stage1/dapo/seed1"}
    assert "--seeds" in jobs["peak/dapo/seed1"].argv and "0,1" in jobs["peak/dapo/seed1"].argv
    assert jobs["peak/qae/seed0"].deps == ["stage1/qae/seed0"]
    assert jobs["stage2/armor_late/seed1"].deps == ["peak/dapo/seed1"]   # the rule's step is in peak.json
    assert "--late" in jobs["peak/dapo/seed1"].argv
    arms = build_arms(p)
    assert arm_seeds(p.protocol, arms["qae_cont"], [0, 1]) == [0]
    assert arm_seeds(p.protocol, arms["armor"], [0, 1]) == [0, 1]


FIXED = TWO_SEEDS.replace("  late_start_fraction: 0.5\n", "  late_start_fraction: 0.5\n  peak_step: 2\n")


def test_a_fixed_theta_star_waits_for_its_checkpoint_the_late_start_for_finished_runs(tmp_path):
    """A fixed θ* before stage 1's end: θ* is chosen as soon as its checkpoint exists; the late start by rule
    (read from the curves after θ*) only from finished stage-1 runs, and only when the plan runs a late arm,
    so it never depends on how far a run had got when the job ran."""
    p = load_preset(_preset(tmp_path, FIXED))
    jobs = {j.key: j for j in build_jobs(p, tmp_path / "runs")}
    assert set(jobs["peak/dapo/seed1"].deps) == {"stage1/dapo/seed0", "stage1/dapo/seed1"}
    assert "--late" in jobs["peak/dapo/seed1"].argv
    jobs = {j.key: j for j in build_jobs(p, tmp_path / "runs", only=["fig4"])}     # no late arm
    assert "stage2/armor_late/seed0" not in jobs and "--late" not in jobs["peak/dapo/seed1"].argv
    assert set(jobs["peak/dapo/seed1"].deps) == {"ckpt/dapo/seed0/step2", "ckpt/dapo/seed1/step2"}


def test_the_late_start_is_never_chosen_from_an_unfinished_run(tmp_path, capsys):
    f = _preset(tmp_path, FIXED)
    p, root = load_preset(f), tmp_path / "runs"
    _fake_run(run_dir(root, p, "dapo", 0), [(0, 0.3), (2, 0.6), (4, 0.5), (6, 0.2)], [2, 4, 6])
    _fake_run(run_dir(root, p, "dapo", 1), [(0, 0.3), (2, 0.6), (4, 0.5)], [2, 4], done=False)
    argv = ["select-peak", "--preset", str(f), "--root", str(root), "--arm", "dapo", "--seed", "0"]
    assert cli.main(argv) == 0                     # θ* alone: fixed, its checkpoints exist
    pk = json.loads((run_dir(root, p, "dapo", 0) / "peak.json").read_text())
    assert pk["step"] == 2 and "late" not in pk
    assert cli.main(argv + ["--late"]) == 2
    assert ("chosen from finished stage-1 runs; not finished (6 steps): " + str(run_dir(root, p, "dapo", 1))
            in capsys.readouterr().err)
    _fake_run(run_dir(root, p, "dapo", 1), [(0, 0.3), (2, 0.6), (4, 0.5), (6, 0.4)], [2, 4, 6])
    assert cli.main(argv + ["--late"]) == 0
    # mean curve .3, .6, .5, .3: floor .3, threshold .45 at f = .5 -> step 6
    assert json.loads((run_dir(root, p, "dapo", 0) / "peak.json").read_text())["late"]["step"] == 6


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("single_seed_arms: [qae,", "single_seed_arms: [qea,"),
     r"protocol.single_seed_arms: \['qea'\] are not arms"),
    (lambda t: t.replace("single_seed_arms: [qae, qae_cont,", "single_seed_arms: [qae,"),
     r"protocol.single_seed_arms/side_arms: 'qae_cont' runs seed\(s\) \[1\], which 'qae', the run it starts "
     r"from, does not run"),
    (lambda t: t.replace("schedule: {{total_steps: 6,", "schedule: {{total_steps: 6, keep_last: 2,"),
     r"protocol.late_start_fraction=0.5: .*schedule.keep_last=2"),
])
def test_bad_seed_and_late_settings_fail_before_any_work(tmp_path, edit, message):
    with pytest.raises(ExperimentError, match=message):
        build_jobs(load_preset(_preset(tmp_path, edit(TWO_SEEDS))), tmp_path / "runs")


def test_the_headroom_control_is_a_stage1_dapo_on_its_own_prompts(tmp_path):
    text = TWO_SEEDS.replace("  stage2_steps: 4\n", "  stage2_steps: 4\n  headroom_steps: 9\n"
                                                    "  headroom_data: {world}/data/train_natural.jsonl\n")
    p = load_preset(_preset(tmp_path, text))
    arms = build_arms(p)
    nat = arms["dapo_natural"]
    assert nat.stage == 1 and nat.figures == ["world"] and not nat.evaluate
    ov = train_overrides(p, tmp_path / "runs", nat, 1)
    assert (f"data.train={tmp_path / 'world'}/data/train_natural.jsonl" in ov
            and "schedule.total_steps=9" in ov)
    jobs = {j.key: j for j in build_jobs(p, tmp_path / "runs")}
    assert "stage1/dapo_natural/seed1" in jobs and "peak/dapo_natural/seed0" not in jobs
    assert "world" in build_jobs(p, tmp_path / "runs", only=["world"])[-1].argv  # the figures job draws it
    with pytest.raises(Exception,
                       match=r"protocol.headroom_data: None must name the control's training prompts"):
        load_preset(_preset(tmp_path, TWO_SEEDS.replace("  stage2_steps: 4\n", "  stage2_steps: 4\n"
                                                                                "  headroom_steps: 9\n")))


def test_the_world_job_builds_the_protocols_world_design(tmp_path):
    v1 = {j.key: j for j in build_jobs(load_preset(_preset(tmp_path)), tmp_path / "runs")}["world"]
    assert "--version" not in v1.argv
    text = TWO_SEEDS.replace("  stage2_steps: 4\n", "  stage2_steps: 4\n  world_version: 2\n")
    v2 = {j.key: j for j in build_jobs(load_preset(_preset(tmp_path, text)), tmp_path / "runs")}["world"]
    assert v2.argv[-2:] == ["--version", "2"]
    with pytest.raises(Exception, match=r"protocol.world_version: 3 must be 1 or 2"):
        load_preset(_preset(tmp_path, TWO_SEEDS.replace("  stage2_steps: 4\n", "  stage2_steps: 4\n"
                                                                                "  world_version: 3\n")))

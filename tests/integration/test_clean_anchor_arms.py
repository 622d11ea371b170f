"""The oracle-clean anchor arms (protocol.clean_anchor_modes, issue 44) in the plan: armor_restart_clean is
the authors' restart from armor_reset_never_clean's own run (its restart point chosen on that run's curve,
its restart.json in that run's folder), beside armor_restart's, which is unchanged."""
import json

from armor.config import load_config
from reproduce.dag.graph import build_jobs
from reproduce.jobs import cli
from reproduce.jobs.peaks import restart_file, start_point
from reproduce.matrix import arms as arms_mod
from reproduce.matrix.arms import arm_definitions, build_arms
from reproduce.matrix.overrides import train_overrides
from reproduce.matrix.presets import load_preset, run_dir

from test_restart_and_seeds import THREE, _preset
from test_seeds_and_late_start import _fake_run

CLEAN = THREE.replace("  reset_sweep: [2, 4]\n", "  reset_sweep: [2, 4]\n  clean_anchor_modes: [shortcut]\n"
                      ).replace("name: mini\n",
                                "name: mini\nlogging: {{answer_modes: reproduce.toy.task:classify}}\n")


def _with_clean_arms(monkeypatch):
    """A figure that draws the clean arms (no committed preset's does yet)."""
    real = arms_mod.figure_arms

    def figure_arms(p):
        f = real(p)
        f["fig4"] = f["fig4"] + ["anchor_only_clean", "armor_restart_clean"]
        return f
    monkeypatch.setattr(arms_mod, "figure_arms", figure_arms)


def test_the_clean_restart_waits_for_its_own_source_run(tmp_path, monkeypatch):
    _with_clean_arms(monkeypatch)
    p, root = load_preset(_preset(tmp_path, CLEAN)), tmp_path / "runs"
    arms = build_arms(p)
    assert {"anchor_only_clean", "armor_reset_never_clean", "armor_restart_clean"} <= set(arms)
    r = arms["armor_restart_clean"]
    assert (r.start, r.restart_from, arms["armor_restart"].restart_from) == \
        ("restart", "armor_reset_never_clean", "armor_reset_never")
    jobs = {j.key: j for j in build_jobs(p, root)}
    for s in (0, 1, 2):
        assert jobs[f"stage2/armor_restart_clean/seed{s}"].deps == \
            [f"restart/armor_reset_never_clean/seed{s}"]
        assert jobs[f"stage2/armor_restart/seed{s}"].deps == [f"restart/armor_reset_never/seed{s}"]
        clean = jobs[f"restart/armor_reset_never_clean/seed{s}"]
        paper = jobs[f"restart/armor_reset_never/seed{s}"]
        assert set(clean.deps) == {f"stage2/armor_reset_never_clean/seed{x}" for x in {0, 1, s}}
        assert clean.argv[-2:] == ["--arm", "armor_reset_never_clean"] and "--arm" not in paper.argv
    # both restarts' sources train first in stage 2, every seed
    order = [k for k in jobs if k.startswith("stage2/")]
    assert {k.split("/")[1] for k in order[:6]} == {"armor_reset_never", "armor_reset_never_clean"}


def test_select_restart_of_the_clean_source_and_the_clean_restart_reads_it(tmp_path, capsys, monkeypatch):
    """select-restart --arm armor_reset_never_clean: the argmax of that run's selection-seed mean curve within
    the window, written into its folder; armor_restart_clean starts from that run's checkpoint there, with
    the oracle filter; armor_reset_never's restart.json is not written."""
    f = _preset(tmp_path, CLEAN)
    p, root = load_preset(f), tmp_path / "runs"
    ck = [0, 2, 4, 6, 8]
    for s in (0, 1):
        run = run_dir(root, p, "armor_reset_never_clean", s)
        _fake_run(run, [(0, 0.5), (2, 0.8), (4, 0.6), (6, 0.9), (8, 0.4)], ck)    # within r <= 4: argmax 2
        (run / "DONE").write_text("")
        dapo = run_dir(root, p, "dapo", s)
        dapo.mkdir(parents=True, exist_ok=True)
        (dapo / "peak.json").write_text(json.dumps({"step": 6, "checkpoint": str(dapo / "checkpoints/x")}))
    assert cli.main(["select-restart", "--preset", str(f), "--root", str(root), "--seed", "0",
                     "--arm", "armor_reset_never_clean"]) == 0
    assert "stage-2 step 2 (total 8" in capsys.readouterr().out
    assert not restart_file(root, p, 0).exists()
    rs = json.loads(restart_file(root, p, 0, "armor_reset_never_clean").read_text())
    src = str(run_dir(root, p, "armor_reset_never_clean", 0) / "checkpoints" / "step_000002")
    assert (rs["source"], rs["stage2_step"], rs["checkpoint"]) == ("armor_reset_never_clean", 2, src)
    arm = arm_definitions(p.protocol)["armor_restart_clean"]
    start = start_point(p, root, arm, 0)
    assert start == {"step": 8, "checkpoint": src, "stage2_step": 2}
    cfg = load_config(f, train_overrides(p, root, arm, 0, start))
    assert cfg.model.path == cfg.algo.reference.path == src and cfg.schedule.total_steps == 6
    assert (cfg.algo.anchor.filter, cfg.algo.anchor.exclude_modes) == ("exclude_modes", ["shortcut"])
    # a source no arm restarts from is refused, naming it
    assert cli.main(["select-restart", "--preset", str(f), "--root", str(root), "--seed", "0",
                     "--arm", "anchor_only_clean"]) == 2
    assert "no arm of preset" in capsys.readouterr().err


def test_with_keep_last_the_clean_source_keeps_every_candidate_restart_point(tmp_path):
    text = CLEAN.replace("save_every: 2, validate_every: 2}}",
                         "save_every: 2, validate_every: 2, keep_last: 1}}")
    text = text.replace("  late_start_step: 6\n",
                        "  late_start_step: 6\n  peak_step: 4\n  qae_peak_step: 4\n")
    p = load_preset(_preset(tmp_path, text))
    arms = arm_definitions(p.protocol)
    start = {"step": 4, "checkpoint": "x"}
    for name in ("armor_reset_never", "armor_reset_never_clean"):
        kv = dict(o.split("=", 1) for o in train_overrides(p, tmp_path, arms[name], 0, start))
        assert kv["schedule.keep_steps"] == "[2,4]", name
    kv = dict(o.split("=", 1) for o in train_overrides(p, tmp_path, arms["anchor_only_clean"], 0, start))
    assert "schedule.keep_steps" not in kv

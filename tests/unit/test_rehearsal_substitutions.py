"""The CPU rehearsal's substitutions (reproduce/matrix/rehearsal.py): every changed field is listed, the
scaled steps keep the paper's order so every gate and branch of the DAG still exists, and bad uses fail in
one line."""
import dataclasses

import pytest

from reproduce import run_all
from reproduce.dag.graph import build_jobs
from reproduce.matrix import rehearsal
from reproduce.matrix.arms import build_arms
from reproduce.matrix.presets import ExperimentError, load_preset, preset_root

PAPER = list(rehearsal.FAMILIES)


def _flat(obj, prefix=""):
    """A dataclass (or mapping) as {dotted key: value}."""
    d = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
    out = {}
    for k, v in d.items():
        if k == "foreign":          # the raw protocol section: compared typed, below
            continue
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@pytest.fixture(params=PAPER)
def pair(request, tmp_path):
    paper = load_preset(request.param)
    reh, subs = rehearsal.rehearsal_preset(paper, tmp_path)
    return paper, reh, subs, tmp_path


def test_scale_steps_and_arm_names():
    assert rehearsal.scale_steps(360) == 36 and rehearsal.scale_steps(5) == 1
    assert rehearsal.scale_steps(1) == 1
    assert rehearsal.scale_steps([80, 120, 160]) == [8, 12, 16]
    assert rehearsal.scale_steps(None) is None and rehearsal.scale_steps(0) == 0
    assert rehearsal.scale_arm("armor_restart_160") == "armor_restart_16"
    assert rehearsal.scale_arm("qae_armor_reset_150") == "qae_armor_reset_15"
    assert rehearsal.scale_arm(["armor", "mix_a0.9", "armor_reset_80"]) == ["armor", "mix_a0.9",
                                                                          "armor_reset_8"]


def test_every_changed_field_is_a_listed_substitution(pair):
    """Nothing differs from the paper preset but what the list says (the report prints the list)."""
    paper, reh, subs, _ = pair
    listed = {s.field: s for s in subs}
    a = _flat(paper.cfg) | _flat(paper.protocol, "protocol.")
    b = _flat(reh.cfg) | _flat(reh.protocol, "protocol.")
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    changed -= {"name", "protocol.rehearsal_of"}      # the rehearsal's own name and mark
    assert changed == set(listed), (changed - set(listed), set(listed) - changed)
    for k in changed:
        assert b[k] == listed[k].rehearsal and a[k] == listed[k].paper, k
    assert all(s.why for s in subs)
    assert reh.protocol.rehearsal_of == paper.name and reh.name == paper.name + rehearsal.SUFFIX


def test_scaled_steps_keep_the_papers_order(pair):
    paper, reh, _, _ = pair
    p, q = paper.protocol, reh.protocol
    assert 0 < q.peak_step < q.stage1_steps and q.stage2_steps >= 1
    if p.late_start_step:
        assert q.peak_step < q.late_start_step < q.stage1_steps
    if p.qae_peak_step:
        assert 0 < q.qae_peak_step < q.stage1_steps
    for sweep in (q.reset_sweep, q.restart_sweep, q.qae_reset_sweep, q.qwen3_tau1_until):
        assert len(set(sweep)) == len(sweep)            # distinct arms stay distinct
    assert all(0 < t < q.stage2_steps for t in q.restart_sweep)   # restart points inside stage 2
    assert all(0 < t <= q.stage1_steps + q.stage2_steps for t in q.qwen3_tau1_until)
    if q.armor_reset_until:
        assert q.armor_reset_until < q.stage2_steps
    # the table steps: θ* for DAPO, θ* + a stage-2 step for ARMOR, as in the paper
    ts = q.table_steps
    assert ts.dapo == q.peak_step and q.peak_step < ts.armor <= q.peak_step + q.stage2_steps
    if ts.qae and q.qae_peak_step:     # (the 8B preset inherits a QAE table step it never runs)
        assert ts.qae == q.qae_peak_step and ts.qae_armor == q.qae_peak_step + q.stage2_steps
    assert q.headline_arm in build_arms(reh)


def test_every_gate_and_branch_still_exists(pair):
    """The rehearsal plans the paper preset's jobs, one for one (arm names scaled), checkpoint gates inside
    their runs' lengths (build_jobs checks retention: every gated step is kept)."""
    paper, reh, _, root = pair
    jp = build_jobs(paper, root / "paper")
    jr = build_jobs(reh, root)
    kinds = lambda jobs: sorted(j.kind for j in jobs if j.kind not in ("fetch", "world"))  # noqa: E731
    assert kinds(jp) == kinds(jr)
    assert [j.key for j in jr if j.kind == "world"] == ["world"] and not [j for j in jr if j.kind == "fetch"]
    p, q = paper.protocol, reh.protocol
    for j in jr:
        if j.kind == "wait_checkpoint":
            assert 0 < int(j.key.rsplit("step", 1)[1]) <= max(q.stage1_steps, q.stage2_steps), j.key
    assert len([j for j in jr if "branch_note" in j.info]) == len([j for j in jp if "branch_note" in j.info])
    assert preset_root(root, reh) != preset_root(root, paper)


def test_eval_keeps_the_paper_protocol_on_shipped_files(pair):
    paper, reh, _, _ = pair
    q = reh.protocol
    assert q.eval_protocol == paper.protocol.eval_protocol == "paper"
    assert "gpqa_diamond" not in q.eval_benchmarks and "mmlu_pro_sample300" in q.eval_benchmarks
    assert {"aime24", "aime25", "amc23"} <= set(q.eval_benchmarks)
    assert q.eval_limit == rehearsal.EVAL_LIMIT and q.nodes == 1 and q.gpus_per_node == 0


def test_the_qwen3_rehearsal_builds_a_qwen3_world(tmp_path):
    reh, _ = rehearsal.rehearsal_preset(load_preset("qwen3-8b-base"), tmp_path)
    assert reh.world_build_args()[-2:] == ["--arch", "qwen3"] and "--quick" in reh.world_build_args()
    reh7, _ = rehearsal.rehearsal_preset(load_preset("qwen25-math-7b"), tmp_path)
    assert "--arch" not in reh7.world_build_args() and "--quick" not in reh7.world_build_args()
    # under vLLM (CPU attention: heads of 32 or more) the 7B rehearsal builds QWEN2_ARCH, in its own folder
    v7, subs = rehearsal.rehearsal_preset(load_preset("qwen25-math-7b"), tmp_path, engine="vllm")
    assert v7.world_build_args()[-2:] == ["--arch", "qwen2"] and v7.cfg.rollout.engine == "vllm"
    assert v7.name == "qwen25-math-7b-rehearsal-vllm" and "rollout.engine" not in {s.field for s in subs}


def test_rehearse_refuses_a_non_paper_preset_and_gpu_flags(tmp_path, capsys):
    with pytest.raises(ExperimentError, match="not a paper preset"):
        rehearsal.check_paper("tiny")
    assert run_all.main(["--preset", "tiny", "--rehearse", "--root", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rehearse: preset 'tiny' is not a paper preset" in err
    for flags in (["--partition", "gpu"], ["--pilot"], ["--nodes", "2"], ["--budget-gpu-hours", "10"]):
        assert run_all.main(["--preset", "qwen25-math-7b", "--rehearse", "--root", str(tmp_path), "--dry-run",
                             *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flags[0] in err, err
    assert run_all.main(["--preset", "tiny", "--rehearse-engine", "vllm", "--root", str(tmp_path),
                         "--dry-run"]) == 2
    assert "goes with --rehearse" in capsys.readouterr().err


def test_a_fixed_restart_starts_without_restart_json(tmp_path):
    """armor_restart_<τ> (the 7B preset's restart_sweep) starts from armor_reset_never's checkpoint at stage-2
    step τ once θ* is chosen: no select-restart job writes a restart.json for it (the 7B rehearsal's first run
    failed on exactly this)."""
    import json

    from reproduce.jobs.peaks import peak_file, start_point
    from reproduce.matrix.arms import arm_definitions
    from reproduce.matrix.presets import ckpt_dir, run_dir

    preset = load_preset("qwen25-math-7b")
    arm = arm_definitions(preset.protocol)["armor_restart_80"]
    assert start_point(preset, tmp_path, arm, 0) is None             # θ* not chosen yet
    pf = peak_file(tmp_path, preset, "dapo", 0)
    pf.parent.mkdir(parents=True)
    pf.write_text(json.dumps({"step": 140, "checkpoint": "x"}))
    never = run_dir(tmp_path, preset, "armor_reset_never", 0)
    assert start_point(preset, tmp_path, arm, 0) == {"step": 220, "checkpoint": str(ckpt_dir(never, 80)),
                                                      "stage2_step": 80}

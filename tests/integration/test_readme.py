"""The README's "Using it" commands, in the order written, on the smoke world of the `world` fixture.

Substitution rule (the commands name the tiny preset; a test cannot spend its 200 steps):
  - `reproduce/presets/tiny.yaml` -> a smoke preset whose model, data and validation set are the fixture's
    world; `runs/tiny/world` -> that world (and `reproduce.toy.build` gets `--quick` and loses `--version N`,
    how the smoke world is built: the build is cached, so it finds the fixture's world and returns);
  - output folders under `runs/` (`runs/mine`, `runs/figures`) -> the test's tmp folder;
  - `step_000100` (a checkpoint of the 200-step tiny run) -> `step_000002`, the last checkpoint of the short
    run;
  - `python` -> this interpreter; small limits are appended: `armor.train` runs 2 steps, `eval.evaluate`
    scores the first 2 (checkpoint) or 4 (run) problems of each benchmark.
Commands that need a GPU, a SLURM partition or the hub are checked for their argument parsing and plan only:
`run_all.py --cluster slurm --partition gpu` gets `--dry-run` (and both run_all commands `--root` in tmp), and
`lm_eval ... --model vllm` (vLLM needs a GPU) is run as `lm_eval --help`, with a check that the task it names
is defined in its `--include_path`.
Every other command runs for real and must exit 0; the train command is run twice (the README says a rerun
resumes: the second finds the run finished).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def using_it_commands() -> list[list[str]]:
    """The README's "Using it" bash block, one argv per command (continuation lines joined, comments
    dropped)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using it"):]
    section = section[:section.index("\n## ", 3)]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(cmd, comments=True) for cmd in block.replace("\\\n", " ").splitlines() if cmd.strip()]


def test_the_readme_block_is_what_this_test_expects():
    """The test below knows each command by its program; a command added to the README must be added here."""
    kinds = [" ".join(c[:3]) if c[0] == "python" and c[1] == "-m" else " ".join(c[:2])
             for c in using_it_commands()]
    assert kinds == ["python -m reproduce.toy.build", "python -m armor.train", "python -m armor.train",
                     "python -m eval.evaluate", "python -m eval.evaluate", "python -m eval.grade",
                     "python reproduce/run_all.py", "python reproduce/run_all.py", "python -m figures",
                     "lm_eval --include_path"], kinds


def _substitute(argv: list[str], world: Path, preset: Path, tmp: Path) -> list[str]:
    out = []
    for a in argv:
        a = a.replace("reproduce/presets/tiny.yaml", str(preset)).replace("runs/tiny/world", str(world))
        a = re.sub(r"(?<![\w/])runs/(mine|figures)", lambda m: str(tmp / m.group(1)), a)
        out.append(a.replace("step_000100", "step_000002"))
    if out[0] == "python":
        out[0] = sys.executable
    prog = out[2] if out[1] == "-m" else out[1]
    # the fixture's world is the smoke (v1) design
    if prog == "reproduce.toy.build" and "--version" in out:
        i = out.index("--version")
        out = out[:i] + out[i + 2:]
    extra = {"reproduce.toy.build": ["--quick"],
             "eval.evaluate": ["--limit", "2" if "--checkpoint" in out else "4",
                               "--no-progress"]}.get(prog, [])
    if prog == "armor.train" and "--config" in out:
        extra = ["schedule.total_steps=2", "schedule.save_every=2", "validation.max_problems=4"]
    if prog == "reproduce/run_all.py":
        extra = ["--root", str(tmp / "runs")] + ([] if "--dry-run" in out else ["--dry-run"])
    return out + extra


def test_using_it_commands_run_in_order_on_the_smoke_world(world, tmp_path):
    preset = tmp_path / "smoke.yaml"
    preset.write_text(yaml.safe_dump({
        "base": str(ROOT / "reproduce" / "presets" / "smoke.yaml"),
        "model": {"path": str(world / "base_model")}, "data": {"train": str(world / "data" / "train.jsonl")},
        "validation": {"benchmarks": [f"toy_val={world / 'data' / 'validation.jsonl'}"]}}))
    env = {**os.environ, "ARMOR_PROGRESS": "0", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("ARMOR_FAULT", None)
    outputs = []
    for argv in using_it_commands():
        if argv[0] == "lm_eval":
            task = argv[argv.index("--tasks") + 1]
            include = ROOT / argv[argv.index("--include_path") + 1]
            assert any(yaml.safe_load(f.read_text().replace("!function", "")).get("task") == task
                       for f in include.glob("*.yaml")), task
            exe = shutil.which("lm_eval") or str(Path(sys.executable).with_name("lm_eval"))
            if not Path(exe).exists():
                pytest.fail("lm_eval is not installed (pip install -e '.[eval]')")
            argv = [exe, "--help"]
        else:
            argv = _substitute(argv, world, preset, tmp_path)
        runs = 2 if "armor.train" in argv and "--config" in argv else 1
        for _ in range(runs):
            r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"{shlex.join(argv)}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
            outputs.append((argv, r.stdout))
    def out(*words):
        return next(o for a, o in outputs if all(w in a for w in words))
    assert "algo.mix.alpha  (float; default 1.0)" in out("armor.train", "--help")   # the help command
    mine = tmp_path / "mine"
    assert (mine / "DONE").is_file() and (mine / "checkpoints" / "step_000002").is_dir()
    train_runs = [o for a, o in outputs if "--config" in a]
    # the rerun resumes (here: done)
    assert "already finished (DONE); nothing to do" in train_runs[1]
    assert list((mine / "eval").glob("step_000002/toy_test__toy__k4.json"))
    assert out("eval.grade").strip().splitlines()[-1].startswith("accuracy:")
    assert "stage1/dapo/seed0" in out("reproduce/run_all.py", "--cluster")       # the SLURM plan, dry
    assert (tmp_path / "figures" / "fig4.png").stat().st_size > 1000


def test_a_missing_toy_world_says_the_exact_command_that_builds_it(world, tmp_path):
    """`python -m armor.train --config reproduce/presets/smoke.yaml` where the world is not built (a fresh
    clone: here a folder with no runs/) fails before any work, printing the build command; that command, run
    as printed in the same folder, leaves a world the same training command then trains on. (The folder's
    runs/smoke/world is linked to the fixture's quick world before the command runs, so the build finds it
    cached instead of spending the fixture's SFT again: same config, seed and --quick, so the same world.json
    hash.)"""
    env = {**os.environ, "ARMOR_PROGRESS": "0"}
    env.pop("ARMOR_FAULT", None)
    train = [sys.executable, "-m", "armor.train", "--config",
             str(ROOT / "reproduce" / "presets" / "smoke.yaml"), "output_dir=out", "schedule.total_steps=1",
             "validation.max_problems=4"]
    pp = {**env, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(train, cwd=tmp_path, env=pp, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and not (tmp_path / "out").exists(), r.stderr
    assert "model.path: 'runs/smoke/world/base_model' does not exist" in r.stderr
    cmd = next(line.strip() for line in r.stderr.splitlines()
               if line.strip().startswith("python -m reproduce"))
    assert cmd == "python -m reproduce.toy.build --out runs/smoke/world --quick"
    (tmp_path / "runs" / "smoke").mkdir(parents=True)
    (tmp_path / "runs" / "smoke" / "world").symlink_to(world)
    b = subprocess.run([sys.executable, *shlex.split(cmd)[1:]], cwd=tmp_path, env=pp, capture_output=True,
                       text=True, timeout=600)
    assert b.returncode == 0, b.stderr[-2000:]
    r = subprocess.run(train, cwd=tmp_path, env=pp, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and (tmp_path / "out" / "DONE").is_file(), r.stderr[-3000:]


def test_the_missing_world_hint_names_the_presets_world_design(tmp_path, monkeypatch):
    """The tiny preset trains in world v2 (protocol.world_version): the hint's build command says so; the
    smoke preset's world is the quick v1 build. The hint is the preset's own (`#hint:` lines, armor/train.py),
    and for every shipped toy preset it is the command of the driver's `world` job."""
    from armor.config import load_config
    from armor.train import missing_model_hint
    from reproduce.matrix.presets import PRESETS_DIR, load_preset
    monkeypatch.chdir(tmp_path)                     # no runs/ here: neither world is built
    tiny = missing_model_hint(PRESETS_DIR / "tiny.yaml", load_config(PRESETS_DIR / "tiny.yaml", []))
    assert "python -m reproduce.toy.build --out runs/tiny/world --version 2\n" in tiny
    smoke = missing_model_hint(PRESETS_DIR / "smoke.yaml", load_config(PRESETS_DIR / "smoke.yaml", []))
    assert "python -m reproduce.toy.build --out runs/smoke/world --quick\n" in smoke
    toy = [p for p in (*PRESETS_DIR.glob("*.yaml"), *PRESETS_DIR.glob("probes/*.yaml"))
           if load_preset(p).world_build_args() is not None]
    assert len(toy) >= 3
    for path in toy:
        hint = missing_model_hint(path, load_config(path, [])) or ""
        cmd = shlex.join(["python", "-m", "reproduce.toy.build", *load_preset(path).world_build_args()])
        assert f"    {cmd}\n" in hint, (path, hint)
    # overridden model.path: not the preset's world, no hint of it
    moved = load_config(PRESETS_DIR / "smoke.yaml", ["model.path=elsewhere/base_model"])
    assert missing_model_hint(PRESETS_DIR / "smoke.yaml", moved) is None

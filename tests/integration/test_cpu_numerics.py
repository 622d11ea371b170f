"""The CPU numerics pins (common/cpu_numerics.py): set where a process starts, before torch loads.

Entry points pin before their imports (a `python -m` run imports the package first, so the library packages'
`__init__` must not load torch, nor do they pin); the packages of commands (reproduce, bench) pin in theirs;
the job wrapper pins before a job's command starts, which inherits the pins with the environment. The
environment and ARMOR_CPU_ISA=native win over them."""
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from common import cpu_numerics

ROOT = Path(__file__).resolve().parents[2]
SHOW = ("import os, torch; print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'), "
        "os.environ.get('OMP_WAIT_POLICY'))")
# `python -m MODULE --help` (or the script) in this process, as the interpreter runs it, then what is in force
RUN = ("import runpy, sys\nsys.argv = [{name!r}, '--help']\n"
       "try:\n    runpy.{how}({name!r}, run_name='__main__')\nexcept SystemExit:\n    pass\n" + SHOW)
x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                         reason="the pins are x86-64's")
PINNED = ["AVX2", "AVX2,STRICT", "PASSIVE"]


def _clean_env(**env) -> dict:
    drop = (*cpu_numerics.PINS, *cpu_numerics.THREADS, cpu_numerics.SWITCH)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **env}


def _run(code: str, **env) -> list[str]:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_clean_env(**env), capture_output=True,
                       text=True, check=True)
    return r.stdout.strip().splitlines()[-1].split()


def _entry(name: str, **env) -> list[str]:
    how = "run_path" if name.endswith(".py") else "run_module"
    return _run(RUN.format(name=name, how=how), **env)


@x86
@pytest.mark.parametrize("entry", ["armor.train", "eval.evaluate", "reproduce/run_all.py",
                                   "reproduce.toy.build", "reproduce.jobs", "bench.step_time"])
def test_each_entry_point_pins_before_torch_loads(entry):
    assert _entry(entry) == PINNED


@x86
@pytest.mark.parametrize("package", ["reproduce", "bench"])
def test_the_packages_of_commands_pin_on_import(package):
    assert _run(f"import {package}\n{SHOW}") == PINNED


def test_the_library_packages_set_nothing_on_import():
    code = ("import os, common, armor, armor.config, eval, eval.settings, slurm, slurm.launcher, figures\n"
            "print(os.environ.get('MKL_CBWR'), os.environ.get('OMP_WAIT_POLICY'))")
    assert _run(code) == ["None", "None"]


@x86
def test_a_job_inherits_the_pins_from_the_wrapper(tmp_path):
    """slurm/jobwrap.py's run_job (local and SLURM jobs start there) pins before the job's command starts."""
    d = tmp_path / "job"
    d.mkdir()
    spec = {"key": "probe", "argv": [sys.executable, "-c", SHOW], "submission": "s1", "cwd": str(ROOT),
            "env": {}}
    (d / "spec.json").write_text(json.dumps(spec))
    _run(f"from slurm import jobwrap\nassert jobwrap.run_job({str(d)!r}, install_handlers=False) == 0\n"
         "import os; print(os.environ.get('MKL_CBWR'))")
    out = [line for line in (d / "log.out").read_text().splitlines() if line and not line.startswith("===")]
    assert out[-1].split() == PINNED


@x86
def test_the_environment_and_the_switch_win():
    assert _entry("armor.train", ATEN_CPU_CAPABILITY="default")[0] == "DEFAULT"
    # nothing set: torch's own choice; the thread wait policy is not numerics and stays
    assert _entry("armor.train", ARMOR_CPU_ISA="native")[1:] == ["None", "PASSIVE"]


def test_unpinned_is_reported():
    ok = {"cpu_capability": "AVX2", cpu_numerics.SWITCH: "avx2"}
    assert not cpu_numerics.unpinned(ok)
    assert not cpu_numerics.unpinned({**ok, "cpu_capability": "AVX512", cpu_numerics.SWITCH: "native"})
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert cpu_numerics.unpinned({**ok, "cpu_capability": "AVX512"})

"""The CPU numerics pins (common/cpu_numerics.py): set by every package before torch loads, overridable."""
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from common import cpu_numerics

ROOT = Path(__file__).resolve().parents[1]
PROBE = "import {first}, os, torch; print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'))"
x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the pins are x86-64's")


def _probe(first: str, **env) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (*cpu_numerics.PINS, cpu_numerics.SWITCH)}
    r = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], cwd=ROOT, env={**clean, **env},
                       capture_output=True, text=True, check=True)
    return r.stdout.split()


@x86
@pytest.mark.parametrize("package", ["common", "armor", "eval", "reproduce", "slurm", "bench"])
def test_each_package_pins_before_torch_loads(package):
    assert _probe(package) == ["AVX2", "AVX2,STRICT"]


@x86
def test_the_environment_and_the_switch_win():
    assert _probe("armor", ATEN_CPU_CAPABILITY="default")[0] == "DEFAULT"
    assert _probe("armor", ARMOR_CPU_ISA="native")[1] == "None"          # nothing set: torch's own choice


def test_unpinned_is_reported():
    ok = {"cpu_capability": "AVX2", cpu_numerics.SWITCH: "avx2"}
    assert not cpu_numerics.unpinned(ok)
    assert not cpu_numerics.unpinned({**ok, "cpu_capability": "AVX512", cpu_numerics.SWITCH: "native"})
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert cpu_numerics.unpinned({**ok, "cpu_capability": "AVX512"})

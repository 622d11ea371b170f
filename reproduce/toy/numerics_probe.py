"""`python -m reproduce.toy.numerics_probe`: the quick world's base weights under each torch CPU capability.

Builds a --quick toy world in a child process per ATEN_CPU_CAPABILITY (default, avx2, avx512) and prints a
sha256 prefix of its base model's weights: on an AVX-512 CPU the three differ, which is why the suite pins
the CPU numerics (common/cpu_numerics.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

# run in each child: build the world, hash its base weights
CHILD = ("import hashlib,sys,torch;from pathlib import Path;from reproduce.toy.build import build_world;"
         "from safetensors.torch import load_file;o=Path(sys.argv[1]);"
         "build_world(o,seed=0,quick=True,log=lambda *a,**k:None);"
         "sd=load_file(str(o/'base_model'/'model.safetensors'));"
         "print(torch.backends.cpu.get_cpu_capability(),"
         "hashlib.sha256(b''.join(v.numpy().tobytes() for _,v in sorted(sd.items()))).hexdigest()[:16])")


def probe(capabilities=("default", "avx2", "avx512")) -> None:
    """Hash the weights of a --quick world built in a child process under each capability."""
    print("quick world's base weights (sha256 prefix) under each torch CPU capability:")
    for cap in capabilities:
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "ATEN_CPU_CAPABILITY": cap, "ARMOR_PROGRESS": "0"}
            r = subprocess.run([sys.executable, "-c", CHILD, d + "/w"], env=env, capture_output=True,
                               text=True)
            last = (r.stdout.strip().splitlines() or [r.stderr[-300:]])[-1]
            print(f"  ATEN_CPU_CAPABILITY={cap:8s} ->", last)


if __name__ == "__main__":
    probe()

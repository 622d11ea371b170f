"""The benchmark harness: protocols, the evaluation and grading CLIs, lm-eval tasks (on common/)."""
from common import cpu_numerics

cpu_numerics.pin()   # before torch loads: the same CPU kernels on every x86-64 machine (common/cpu_numerics.py)

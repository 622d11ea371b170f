"""The benchmark harness: registry, grading, sampling, avg@k / pass@k, evaluation CLI."""
from common import cpu_numerics

cpu_numerics.pin()   # before torch loads: the same CPU kernels on every x86-64 machine (common/cpu_numerics.py)

"""The experiment matrix, the driver (run_all.py) and the tiny world."""
from common import cpu_numerics

cpu_numerics.pin()   # before torch loads: the same CPU kernels on every x86-64 machine (common/cpu_numerics.py)

"""Benchmarks and checks that print figures (never timed tests): step time, decode, log-prob memory, grading
throughput, and the GPU check. They use the method packages; nothing in them imports this one."""
from common import cpu_numerics

cpu_numerics.pin()   # the same CPU kernels as the suite's packages (common/cpu_numerics.py); before torch loads

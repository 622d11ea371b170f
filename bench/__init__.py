"""Benchmarks and checks that print figures (never timed tests): step time, decode, log-prob memory, grading
throughput, and the GPU check. They use the method packages; nothing in them imports this one."""
from common import cpu_numerics

# every module here is a command (`python -m bench.step_time` ...): their processes start in this package,
# so it pins the CPU numerics before torch loads (common/cpu_numerics.py)
cpu_numerics.pin()

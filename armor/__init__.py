"""ARMOR: stabilizing on-policy LLM RL with off-policy anchor samples (reproduction suite)."""
import os

from common import cpu_numerics

# libgomp's default spin-waiting makes torch's CPU threads several times slower on a shared, loaded machine
# (measured by bench.step_time); it must be set before torch loads, so the package sets it unless the user did.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
cpu_numerics.pin()   # the same CPU kernels on every x86-64 machine (common/cpu_numerics.py); before torch loads

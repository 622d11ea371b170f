"""SLURM and local job launching: cluster scripts, submitit launcher, job wrapper, warm forks."""
from common import cpu_numerics

cpu_numerics.pin()   # before torch loads: the same CPU kernels on every x86-64 machine (common/cpu_numerics.py)

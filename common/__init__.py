"""The leaf layer: what `armor` (the trainer) and `eval` (the harness) share, and what `reproduce`, `slurm`,
`figures` and `bench` read: rollout engines, grading, the benchmark registry and prompt templates, sampling,
metrics, model loading, the run-folder layout, YAML presets, JSONL I/O with one policy for torn writes, and the
CPU numerics pinning. It imports no other package of this repository (tests/test_layers.py)."""
from common import cpu_numerics as _cpu_numerics

_cpu_numerics.pin()   # before torch loads, whichever package a process imports first (common/cpu_numerics.py)

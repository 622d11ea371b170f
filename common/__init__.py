"""The leaf layer: what `armor` (the trainer) and `eval` (the harness) share, and what `reproduce`, `slurm`,
`figures` and `bench` read: rollout engines, grading, the benchmark registry and prompt templates (with the
shipped benchmark files, common/data/), sampling, metrics, model loading, the run-folder layout, YAML presets,
JSONL I/O with one policy for torn writes, and the CPU numerics pinning (called where a process starts, not
here). It imports no other package of this repository, nor names one in its code
(tests/unit/test_layers.py)."""

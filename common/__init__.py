"""The leaf layer: pieces that `armor`, `eval`, `reproduce`, `slurm` and `figures` all need and that depend on
none of them (file I/O with one policy for torn writes, the CPU numerics pinning). Nothing here imports torch
at module level or any package of this repository."""

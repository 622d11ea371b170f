"""ARMOR: stabilizing on-policy LLM RL with off-policy anchor samples (reproduction suite).

Importing it sets nothing: the CPU numerics and OMP_WAIT_POLICY are set where a process starts
(common/cpu_numerics.py; `python -m armor.train` does it before torch loads)."""

"""The benchmark harness: protocols, the evaluation and grading CLIs, lm-eval tasks (on common/).

Importing it sets nothing: `python -m eval.evaluate` pins the CPU numerics where it starts
(common/cpu_numerics.py)."""

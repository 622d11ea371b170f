"""Analyses that read result files, beside the matrix: the seeds a comparison needs (power.py) and the
stage-2 drift of a regime (drift.py)."""

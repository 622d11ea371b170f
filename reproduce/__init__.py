"""The experiment matrix, the driver (run_all.py) and the tiny world."""
from common import cpu_numerics

# reproduce's modules run as commands (`python -m reproduce.toy.build`, `reproduce.jobs`, run_all.py):
# this package is where their processes start, so it pins their CPU numerics before torch loads
cpu_numerics.pin()

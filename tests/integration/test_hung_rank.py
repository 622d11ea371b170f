"""A rank that stops advancing ends a 2-rank run (torchrun, gloo) with a message naming it, instead of the
others waiting in a collective until parallel.timeout_s (armor/watchdog.py). The rank is frozen at a moment
the test chooses: ARMOR_FAULT=update@2:SIGSTOP:1 (armor/faults.py) stops rank 1 after its first optimizer
update of step 2, as a hung process would be."""
import json
import sys

import pytest

from armor.watchdog import PROGRESS, STALL_EXIT
from test_distributed import ARGS
from toy_runs import SMOKE, run, world_overrides


@pytest.mark.slow      # 30-120 s: run with -m slow (README)
def test_a_frozen_rank_ends_the_run_naming_it(world, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--shutdown-timeout=2", "-m", "armor.train", "--config", str(SMOKE), *world_overrides(world, out),
           "schedule.total_steps=4", "parallel.timeout_s=3600", "parallel.stall_steps=1",
           "parallel.stall_min_s=20", *ARGS]
    r = run(cmd, "update@2:SIGSTOP:1", threads=1)
    assert r.returncode != 0 and not (out / "DONE").exists()
    line = next(x for x in r.stderr.splitlines() if x.startswith("[watchdog rank 0] stall: "))
    print(line)
    assert "rank 1 is stuck: step 2, after " in line and "the other ranks got further (rank 0: step 2" in line
    assert f"ending the job (exit {STALL_EXIT})" in line and "parallel.stall_steps" in line
    assert f"exitcode  : {STALL_EXIT}" in r.stderr                      # torchrun's report of rank 0
    recs = {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in (out / PROGRESS).glob("rank_*")}
    assert recs[0]["count"] > recs[1]["count"]          # rank 0 passed points rank 1 never reached

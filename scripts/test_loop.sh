#!/usr/bin/env bash
# Run the default test suite N times in a row (default 20) in a fresh clone of this checkout's HEAD, stopping at
# the first failure; prints one line per run and a tally. Needs the local SLURM (bash slurm/cluster_up.sh).
#   bash scripts/test_loop.sh [N] [extra pytest args...]
# The SLURM tests refuse to start behind other queued jobs; two loops side by side need ARMOR_SLURM_SHARED=1
# (then the test that restarts the cluster is skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}; shift || true
WORK=$(mktemp -d /tmp/armor-loop.XXXXXX)
git clone -q . "$WORK/repo" && cd "$WORK/repo" || exit 1
bash scripts/setup.sh >"$WORK/setup.log" 2>&1 || { echo "setup failed: $WORK/setup.log"; exit 1; }
echo "loop of $N default-suite runs at $(git rev-parse --short HEAD) in $WORK/repo"
for i in $(seq 1 "$N"); do
  start=$(date +%s)
  rm -rf runs/_cache            # each run builds the smoke world itself, as CI does on a clean clone
  .venv/bin/python -m pytest -q -p no:cacheprovider "$@" >"$WORK/run$i.log" 2>&1
  rc=$?
  echo "run $i/$N: rc=$rc ($(( $(date +%s) - start )) s) $(tail -1 "$WORK/run$i.log")"
  if [ $rc -ne 0 ]; then echo "FAILED at run $i of $N: $WORK/run$i.log"; exit 1; fi
done
echo "$N passed, 0 failed: the default suite passed $N consecutive times"

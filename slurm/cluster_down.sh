#!/usr/bin/env bash
# Stop what slurm/cluster_up.sh started (by the PIDs it recorded); idempotent. Packages, the munge key,
# slurm.conf and the state directory stay, so the next cluster_up.sh is fast.
set -uo pipefail
STATE="${ARMOR_SLURM_STATE:-/var/run/armor-slurm}"

stop() {  # stop NAME PIDFILE
  local name="$1" f="$2" pid
  [ -s "$f" ] || { echo "[cluster_down] $name: not started by cluster_up (no $f)"; return 0; }
  pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; sleep 0.2; fi
    echo "[cluster_down] $name stopped (pid $pid)"
  else
    echo "[cluster_down] $name was not running (stale pid $pid)"
  fi
  rm -f "$f"
}

stop slurmd "$STATE/slurmd.pid"
stop slurmctld "$STATE/slurmctld.pid"
stop munged "$STATE/munged.pid"
exit 0

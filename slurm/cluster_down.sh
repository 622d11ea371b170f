#!/usr/bin/env bash
# Stop what slurm/cluster_up.sh started (by the PIDs it recorded); idempotent. Packages, the munge key,
# slurm.conf and the state directory stay, so the next cluster_up.sh is fast.
set -uo pipefail
STATE="${ARMOR_SLURM_STATE:-/var/run/armor-slurm}"

LOG_NAME=cluster_down
. "$(dirname "$0")/cluster_lib.sh"

stop slurmd "$STATE/slurmd.pid"
stop slurmctld "$STATE/slurmctld.pid"
stop munged "$STATE/munged.pid"
exit 0

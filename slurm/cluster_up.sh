#!/usr/bin/env bash
# Bring up a single-node SLURM cluster on a Debian/Ubuntu machine, as root, without systemd.
#
#   sudo bash slurm/cluster_up.sh          # installs munge + slurm if needed, starts munged/slurmctld/slurmd
#   bash slurm/cluster_down.sh             # stops exactly what this script started
#
# Idempotent: with everything up, a second run checks and does nothing. Knobs (environment):
#   ARMOR_SLURM_STATE   state dir (pid files, logs, spool)           default /var/run/armor-slurm
#   ARMOR_SLURM_TIMEOUT seconds to wait for the node to become idle   default 60
#   ARMOR_SLURM_OVERWRITE=1  replace an /etc/slurm/slurm.conf that this script did not write
#   ARMOR_SLURM_PARTITION    partition name                           default debug
#   ARMOR_SLURM_KEEP_JOBS=1  keep the queue of an earlier slurmctld (see below)
#
# A slurmctld that this script starts begins with an empty queue (`slurmctld -c`): the state directory outlives
# the daemons (and a machine image copies it), and jobs recovered from it would run before, or block, new work
# on this one node. Runs lose nothing by it: `reproduce/run_all.py` resubmits whatever is not finished.
#
# The cluster has no accounting daemon, so `sacct` fails: job states come from squeue/scontrol (finished
# jobs stay visible for MinJobAge=3600 s) and from the marker files of slurm/launcher.py.
set -euo pipefail

STATE="${ARMOR_SLURM_STATE:-/var/run/armor-slurm}"
TIMEOUT="${ARMOR_SLURM_TIMEOUT:-60}"
PARTITION="${ARMOR_SLURM_PARTITION:-debug}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARK="# written by armor-repro slurm/cluster_up.sh"
T0=$(date +%s.%N)

LOG_NAME=cluster_up
. "$(dirname "$0")/cluster_lib.sh"
[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"

# ----------------------------------------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
NODES=("$HOST")
make_conf() {  # prints the slurm.conf this script wants (node line from `slurmd -C`)
NODE_LINE=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -n1)
[ -n "$NODE_LINE" ] || die "slurmd -C printed no NodeName line"
NODE_LINE=$(echo "$NODE_LINE" | sed "s/^NodeName=[^ ]*/NodeName=$HOST NodeAddr=127.0.0.1/")
cat <<EOF
$MARK
# single-node test/user cluster; regenerate by deleting this file and rerunning cluster_up.sh
ClusterName=armor
SlurmctldHost=$HOST(127.0.0.1)
$(conf_common)
AuthInfo=cred_expire=10
StateSaveLocation=/var/lib/armor-slurm/ctld
SlurmdSpoolDir=/var/lib/armor-slurm/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
$NODE_LINE State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

# --------------------------------------------------------------------------------------------- fast path
if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" && command -v sinfo >/dev/null \
   && [ "$(cat "$CONF" 2>/dev/null)" = "$(make_conf 2>/dev/null)" ] \
   && all_usable; then
  log "already up (slurmctld pid $(cat "$STATE/slurmctld.pid"), slurmd pid $(cat "$STATE/slurmd.pid")); nothing to do"
  exit 0
fi

# ------------------------------------------------------------------------------------------------ install
install_missing munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client

mkdir -p "$STATE"
chmod 755 "$STATE"

# ------------------------------------------------------------------------------------------------- munge
munge_key
mkdir -p /var/lib/munge /var/log/munge /run/munge
chown -R munge:munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /var/lib/munge /var/log/munge
chmod 0755 /run/munge

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if munge_ok; then
  log "munged already running"
else
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock 2>/dev/null || true
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid 2>>"$STATE/munged.err" \
    || die "munged failed to start: $(tail -n 3 "$STATE/munged.err")"
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munged started but munge -n | unmunge fails"
  cp /run/munge/munged.pid "$STATE/munged.pid"   # we started it, so cluster_down stops it
  log "munged started (pid $(cat "$STATE/munged.pid"))"
fi

mkdir -p "$CONF_DIR" /var/lib/armor-slurm/ctld /var/lib/armor-slurm/d
NEW_CONF=$(make_conf)
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  [ "${ARMOR_SLURM_OVERWRITE:-0}" = 1 ] || die "$CONF exists and was not written by this script (set ARMOR_SLURM_OVERWRITE=1 to replace it; a backup is kept)"
  cp "$CONF" "$CONF.armor-backup.$(date +%s)"
fi
CONF_CHANGED=0
if [ ! -e "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
  echo "$NEW_CONF" > "$CONF"; chmod 644 "$CONF"; CONF_CHANGED=1
  log "wrote $CONF"
fi

# ----------------------------------------------------------------------------------------------- daemons
if alive "$STATE/slurmctld.pid" && [ $CONF_CHANGED = 1 ]; then
  log "configuration changed: scontrol reconfigure"; scontrol reconfigure || true
fi
if ! alive "$STATE/slurmctld.pid"; then
  CLEAR=-c; [ "${ARMOR_SLURM_KEEP_JOBS:-0}" = 1 ] && CLEAR=
  start_daemon slurmctld "$STATE/slurmctld.pid" slurmctld $CLEAR
  log "slurmctld started (pid $(cat "$STATE/slurmctld.pid"), $([ -n "$CLEAR" ] \
    && echo "empty queue: jobs of an earlier controller dropped" || echo "earlier queue kept"))"
fi
if ! alive "$STATE/slurmd.pid"; then
  start_daemon slurmd "$STATE/slurmd.pid" slurmd
  log "slurmd started (pid $(cat "$STATE/slurmd.pid"))"
fi

# ------------------------------------------------------------------------------------------ wait for idle
wait_usable "$TIMEOUT" "$STATE/slurmctld.log" "$STATE/slurmd.log"
T1=$(date +%s.%N)
log "up: $(node_states | tr '\n' ' ')partition $PARTITION ($(awk "BEGIN{printf \"%.1f\", $T1-$T0}") s)"

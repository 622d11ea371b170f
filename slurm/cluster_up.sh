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

log() { echo "[cluster_up] $*"; }
die() { echo "[cluster_up] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"

alive() {  # alive PIDFILE -> 0 when the recorded process runs
  local f="$1" pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n1 | tr -d '*~#!%$@^-' || true; }
# the node takes jobs: idle, or running (mixed, allocated) or finishing (completing) some
usable() { case "$1" in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac; }

# ----------------------------------------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
make_conf() {  # prints the slurm.conf this script wants (node line from `slurmd -C`)
NODE_LINE=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -n1)
[ -n "$NODE_LINE" ] || die "slurmd -C printed no NodeName line"
NODE_LINE=$(echo "$NODE_LINE" | sed "s/^NodeName=[^ ]*/NodeName=$HOST NodeAddr=127.0.0.1/")
cat <<EOF
$MARK
# single-node test/user cluster; regenerate by deleting this file and rerunning cluster_up.sh
ClusterName=armor
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
DependencyParameters=kill_invalid_depend
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
Waittime=0
JobRequeue=1
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
   && usable "$(node_state)"; then
  log "already up (slurmctld pid $(cat "$STATE/slurmctld.pid"), slurmd pid $(cat "$STATE/slurmd.pid")); nothing to do"
  exit 0
fi

# ------------------------------------------------------------------------------------------------ install
need=()
for pair in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
  bin=${pair%%:*}; pkg=${pair##*:}
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d: the packages' postinst must not try to start services (no systemd/init here)
  had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
  if [ $had_policy = 0 ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi
  if ! apt-get install -y --no-install-recommends munge slurmctld slurmd slurm-client >/tmp/armor-slurm-apt.log 2>&1; then
    apt-get update >>/tmp/armor-slurm-apt.log 2>&1 || true
    apt-get install -y --no-install-recommends munge slurmctld slurmd slurm-client >>/tmp/armor-slurm-apt.log 2>&1 \
      || { [ $had_policy = 0 ] && rm -f /usr/sbin/policy-rc.d; die "apt-get install failed, see /tmp/armor-slurm-apt.log"; }
  fi
  [ $had_policy = 0 ] && rm -f /usr/sbin/policy-rc.d
  log "installed ($(slurmctld -V 2>/dev/null || echo slurm))"
fi
export PATH="$PATH:/usr/sbin:/sbin"

mkdir -p "$STATE"
chmod 755 "$STATE"

# ------------------------------------------------------------------------------------------------- munge
id munge >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin munge
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null 2>&1; then mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null
  else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
chmod 0755 /run/munge
chmod 0400 /etc/munge/munge.key

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
  slurmctld $CLEAR 2>>"$STATE/slurmctld.err" || die "slurmctld failed to start; see $STATE/slurmctld.log and $STATE/slurmctld.err"
  for _ in $(seq 50); do alive "$STATE/slurmctld.pid" && break; sleep 0.1; done
  alive "$STATE/slurmctld.pid" || die "slurmctld exited; see $STATE/slurmctld.log"
  log "slurmctld started (pid $(cat "$STATE/slurmctld.pid"), $([ -n "$CLEAR" ] && echo "empty queue: jobs of an earlier controller dropped" || echo "earlier queue kept"))"
fi
if ! alive "$STATE/slurmd.pid"; then
  slurmd 2>>"$STATE/slurmd.err" || die "slurmd failed to start; see $STATE/slurmd.log and $STATE/slurmd.err"
  for _ in $(seq 50); do alive "$STATE/slurmd.pid" && break; sleep 0.1; done
  alive "$STATE/slurmd.pid" || die "slurmd exited; see $STATE/slurmd.log"
  log "slurmd started (pid $(cat "$STATE/slurmd.pid"))"
fi

# ------------------------------------------------------------------------------------------ wait for idle
deadline=$(( $(date +%s) + TIMEOUT )); resumed=0
while :; do
  st=$(node_state)
  usable "$st" && break
  case "$st" in
    down|drained|draining|fail|failing)
      if [ $resumed = 0 ]; then scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true; resumed=1; fi ;;
  esac
  if [ "$(date +%s)" -ge $deadline ]; then
    echo "[cluster_up] ERROR: node $HOST not idle after ${TIMEOUT}s (state: '${st:-no answer from slurmctld}')." >&2
    echo "  sinfo: $(sinfo -N 2>&1 | tail -n +2 | head -n 3)" >&2
    echo "  last slurmctld log lines:" >&2; tail -n 5 "$STATE/slurmctld.log" >&2 2>/dev/null || true
    echo "  last slurmd log lines:" >&2; tail -n 5 "$STATE/slurmd.log" >&2 2>/dev/null || true
    exit 1
  fi
  sleep 0.5
done
T1=$(date +%s.%N)
log "up: node $HOST $(node_state), partition $PARTITION ($(awk "BEGIN{printf \"%.1f\", $T1-$T0}") s)"

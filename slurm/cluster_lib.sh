# Shared pieces of the local clusters (slurm/cluster_up.sh: one node; slurm/cluster_netns_up.sh: two nodes in
# network namespaces) and of their _down scripts. Sourced, never run; the sourcing script sets LOG_NAME, and
# NODES (the node names) before node_states / all_usable / wait_usable.
export PATH="$PATH:/usr/sbin:/sbin"
# the two-node cluster's names, for cluster_netns_up.sh and cluster_netns_down.sh: node = namespace name
NETNS_NODES=(armor-n1 armor-n2)
NETNS_BRIDGE=armor-nsbr
NETNS_MARK="# written by armor-repro slurm/cluster_netns_up.sh"

log() { echo "[$LOG_NAME] $*"; }
die() { echo "[$LOG_NAME] ERROR: $*" >&2; exit 1; }

alive() {  # alive PIDFILE -> 0 when the recorded process runs
  local f="$1" pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

stop() {  # stop NAME PIDFILE: TERM the recorded process, KILL it after 10 s, remove the pid file
  local name="$1" f="$2" pid
  [ -s "$f" ] || { log "$name: not running (no $f)"; return 0; }
  pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; sleep 0.2; fi
    log "$name stopped (pid $pid)"
  else
    log "$name was not running (stale pid $pid)"
  fi
  rm -f "$f"
}

install_missing() {  # install_missing BIN:PACKAGE...: apt-get the packages whose binary is missing
  local pair bin pkg need=() apt_log="/tmp/$LOG_NAME-apt.log" had_policy=0
  for pair in "$@"; do
    bin=${pair%%:*}; pkg=${pair##*:}
    command -v "$bin" >/dev/null 2>&1 || need+=("$pkg")
  done
  [ ${#need[@]} -gt 0 ] || return 0
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d: the packages' postinst must not try to start services (no systemd/init here)
  [ -e /usr/sbin/policy-rc.d ] && had_policy=1
  if [ $had_policy = 0 ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
  fi
  if ! apt-get install -y --no-install-recommends "${need[@]}" >"$apt_log" 2>&1; then
    apt-get update >>"$apt_log" 2>&1 || true
    apt-get install -y --no-install-recommends "${need[@]}" >>"$apt_log" 2>&1 \
      || { [ $had_policy = 0 ] && rm -f /usr/sbin/policy-rc.d; die "apt-get install failed, see $apt_log"; }
  fi
  [ $had_policy = 0 ] && rm -f /usr/sbin/policy-rc.d
  log "installed ($(slurmctld -V 2>/dev/null || echo slurm))"
}

munge_key() {  # the munge user and /etc/munge/munge.key (created once; both clusters share it)
  id munge >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin munge
  mkdir -p /etc/munge
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null
    else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
}

start_daemon() {  # start_daemon NAME PIDFILE CMD...: a daemonising CMD (stderr: PIDFILE's .err); waits 5 s
  local name="$1" f="$2"; shift 2
  "$@" 2>>"${f%.pid}.err" || die "$name failed to start; see ${f%.pid}.err and its log"
  for _ in $(seq 50); do alive "$f" && break; sleep 0.1; done
  alive "$f" || die "$name exited; see ${f%.pid}.err and its log"
}

conf_common() {  # the slurm.conf lines both clusters share: munge, no accounting, fast scheduling, requeue
cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
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
EOF
}

node_states() {  # "NODE STATE" lines, the state's flag characters removed
  sinfo -h -N -o '%N %T' 2>/dev/null | awk '{ gsub(/[*~#!%$@^-]/, "", $2); print $1, $2 }' | sort -u || true
}

all_usable() {  # every node of NODES takes jobs: idle, running (mixed, allocated) or finishing (completing)
  local s n=0 node
  s=$(node_states)
  for node in "${NODES[@]}"; do
    echo "$s" | grep -Eq "^$node (idle|mixed|allocated|completing)$" && n=$((n + 1))
  done
  [ $n = ${#NODES[@]} ]
}

wait_usable() {  # wait_usable TIMEOUT LOG...: until all_usable (down nodes resumed once); else print the logs
  local timeout="$1" resumed=0 f deadline; shift
  deadline=$(( $(date +%s) + timeout ))
  until all_usable; do
    if [ $resumed = 0 ] && node_states | grep -Eq ' (down|drained|draining|fail|failing)$'; then
      scontrol update NodeName="$(IFS=,; echo "${NODES[*]}")" State=RESUME >/dev/null 2>&1 || true; resumed=1
    fi
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "[$LOG_NAME] ERROR: nodes not usable after $timeout s: '$(node_states | tr '\n' ' ')'" >&2
      for f in "$@"; do echo "  last lines of $f:" >&2; tail -n 5 "$f" >&2 2>/dev/null || true; done
      exit 1
    fi
    sleep 0.5
  done
}

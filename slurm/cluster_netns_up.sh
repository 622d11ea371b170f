#!/usr/bin/env bash
# Bring up a two-node SLURM cluster on ONE machine: each node is a network namespace (`ip netns`) with its own
# IP on a bridge, running its own slurmd; slurmctld and a munged of its own run beside them in the root
# namespace.
#
#   sudo bash slurm/cluster_netns_up.sh    # installs iproute2 munge slurm if needed; network; daemons
#   export SLURM_CONF=/etc/armor-netns/slurm.conf   # then sbatch/srun/squeue/scontrol talk to this cluster
#   bash slurm/cluster_netns_down.sh       # stops exactly what this script started, removes the network
#
# It lives beside the single-node cluster of slurm/cluster_up.sh and never touches it: its own slurm.conf (so
# clients need SLURM_CONF), ports, munged socket, state and spool folders, pid files. The filesystem is shared
# (namespaces split the network only), so a job's run folder is the same path on both nodes.
#
#   bridge armor-nsbr 10.77.0.254  (slurmctld, port 6917)
#     ├─ veth armor-n1h ── netns armor-n1: armor0 10.77.0.1  slurmd -N armor-n1 (port 6918)
#     └─ veth armor-n2h ── netns armor-n2: armor0 10.77.0.2  slurmd -N armor-n2
#
# slurmd runs in its node's namespace through `in_node` below, not `ip netns exec`: that one also mounts a
# fresh /sys, which hides /sys/fs/cgroup, and SLURM 22.05's slurmd then stops ("No filesystem mounted on
# /sys/fs/cgroup ... Unable to initialize cgroup plugin"). Each node sees its own /etc/hosts
# (/etc/netns/<node>/hosts, bind-mounted in a private mount namespace) naming both nodes, so torchrun's
# --master_addr=armor-n1 resolves; the interface is `armor0` in every node: GLOO_SOCKET_IFNAME=armor0.
# Idempotent: with everything up, a second run checks and does nothing. Knobs (environment):
#   ARMOR_NETNS_STATE    pid files, logs, munge socket        default /var/run/armor-netns
#   ARMOR_NETNS_LIB      slurmctld state, slurmd spools       default /var/lib/armor-netns
#   ARMOR_NETNS_CONF     the slurm.conf                       default /etc/armor-netns/slurm.conf
#   ARMOR_NETNS_NET      the /24 network's first 3 octets     default 10.77.0
#   ARMOR_NETNS_PORT     slurmctld port (slurmd: +1)          default 6917
#   ARMOR_NETNS_TIMEOUT  seconds to wait for idle nodes       default 60
set -euo pipefail

STATE="${ARMOR_NETNS_STATE:-/var/run/armor-netns}"
LIB="${ARMOR_NETNS_LIB:-/var/lib/armor-netns}"
CONF="${ARMOR_NETNS_CONF:-/etc/armor-netns/slurm.conf}"
NET="${ARMOR_NETNS_NET:-10.77.0}"
PORT="${ARMOR_NETNS_PORT:-6917}"
TIMEOUT="${ARMOR_NETNS_TIMEOUT:-60}"
NODES=(armor-n1 armor-n2)            # node name = namespace name; node i has address $NET.i
BR=armor-nsbr
IFNAME=armor0
MARK="# written by armor-repro slurm/cluster_netns_up.sh"
SOCK="$STATE/munge/munge.socket.2"
T0=$(date +%s.%N)
export PATH="$PATH:/usr/sbin:/sbin"
export SLURM_CONF="$CONF"

log() { echo "[cluster_netns_up] $*"; }
die() { echo "[cluster_netns_up] ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (it creates namespaces, installs packages and starts daemons)"

alive() {  # alive PIDFILE -> 0 when the recorded process runs
  local f="$1" pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}
node_states() {  # "NODE STATE" lines, the state's flag characters removed
  sinfo -h -N -o '%N %T' 2>/dev/null | awk '{ gsub(/[*~#!%$@^-]/, "", $2); print $1, $2 }' | sort -u || true
}
all_usable() {  # every node idle/mixed/allocated/completing
  local s n=0
  s=$(node_states)
  for node in "${NODES[@]}"; do
    echo "$s" | grep -Eq "^$node (idle|mixed|allocated|completing)$" && n=$((n + 1))
  done
  [ $n = ${#NODES[@]} ]
}
in_node() {  # in_node NODE CMD...: CMD in NODE's network namespace, with NODE's /etc/hosts; /sys stays
  local node="$1"; shift
  unshare --mount --propagation private \
    sh -c 'mount --bind "$1" /etc/hosts && shift && exec nsenter --net="$@"' \
    sh "/etc/netns/$node/hosts" "/var/run/netns/$node" "$@"
}
daemons_alive() {
  alive "$STATE/munged.pid" && alive "$STATE/slurmctld.pid" || return 1
  for node in "${NODES[@]}"; do alive "$STATE/slurmd.$node.pid" || return 1; done
}

# ----------------------------------------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
make_conf() {  # the slurm.conf this script wants (CPUs/memory from `slurmd -C`, the same for both nodes)
local hw
hw=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -n1 | sed 's/^NodeName=[^ ]* //; s/ *UpTime=.*//')
[ -n "$hw" ] || die "slurmd -C printed no NodeName line"
cat <<EOF
$MARK
# two nodes = two network namespaces of this machine; clients need SLURM_CONF=$CONF
ClusterName=armornetns
SlurmctldHost=$HOST($NET.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK,cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
Waittime=0
JobRequeue=1
StateSaveLocation=$LIB/ctld
SlurmdSpoolDir=$LIB/d/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.%n.log
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
EOF
local i=0
for node in "${NODES[@]}"; do
  i=$((i + 1)); echo "NodeName=$node NodeAddr=$NET.$i $hw State=UNKNOWN"
done
echo "PartitionName=netns Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
}

# --------------------------------------------------------------------------------------------- fast path
if command -v sinfo >/dev/null && daemons_alive \
   && [ "$(cat "$CONF" 2>/dev/null)" = "$(make_conf 2>/dev/null)" ] && all_usable; then
  log "already up (slurmctld pid $(cat "$STATE/slurmctld.pid"), nodes ${NODES[*]}); nothing to do"
  exit 0
fi

# ------------------------------------------------------------------------------------------------ install
need=()
for pair in ip:iproute2 munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
  bin=${pair%%:*}; pkg=${pair##*:}
  command -v "$bin" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1   # postinst must not start services
  if [ $had_policy = 0 ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
  fi
  if ! apt-get install -y --no-install-recommends "${need[@]}" >/tmp/armor-netns-apt.log 2>&1; then
    apt-get update >>/tmp/armor-netns-apt.log 2>&1 || true
    apt-get install -y --no-install-recommends "${need[@]}" >>/tmp/armor-netns-apt.log 2>&1 \
      || { [ $had_policy = 0 ] && rm -f /usr/sbin/policy-rc.d
           die "apt-get install failed, see /tmp/armor-netns-apt.log"; }
  fi
  [ $had_policy = 0 ] && rm -f /usr/sbin/policy-rc.d
fi
mkdir -p "$STATE" "$LIB/ctld" "$(dirname "$CONF")"
for node in "${NODES[@]}"; do mkdir -p "$LIB/d/$node"; done
chmod 755 "$STATE"

# ------------------------------------------------------------------------------------------------ network
ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
ip addr show dev "$BR" | grep -q "inet $NET.254/" || ip addr add "$NET.254/24" dev "$BR"
ip link set "$BR" up
i=0
for node in "${NODES[@]}"; do
  i=$((i + 1))
  [ -e "/var/run/netns/$node" ] || ip netns add "$node"
  if ! ip netns exec "$node" ip link show "$IFNAME" >/dev/null 2>&1; then
    ip link del "${node}h" 2>/dev/null || true          # a host end left without its namespace
    ip link add "${node}h" type veth peer name "$IFNAME" netns "$node"
  fi
  ip link set "${node}h" master "$BR"
  ip link set "${node}h" up
  ip netns exec "$node" ip addr show dev "$IFNAME" | grep -q "inet $NET.$i/" \
    || ip netns exec "$node" ip addr add "$NET.$i/24" dev "$IFNAME"
  ip netns exec "$node" ip link set "$IFNAME" up
  ip netns exec "$node" ip link set lo up
  mkdir -p "/etc/netns/$node"
  { echo "$MARK"; echo "127.0.0.1 localhost"; echo "$NET.$i $HOST"; echo "$NET.254 armor-nsctl"
    j=0; for other in "${NODES[@]}"; do j=$((j + 1)); echo "$NET.$j $other"; done
  } > "/etc/netns/$node/hosts"
done

# ------------------------------------------------------------------------------------------------- munge
# a munged of our own on its own socket (AuthInfo=socket=...): the other cluster's munged is left alone
id munge >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin munge
mkdir -p /etc/munge "$STATE/munge"
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null
  else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
chown munge:munge "$STATE/munge"; chmod 0755 "$STATE/munge"
munge_ok() { munge -S "$SOCK" -n 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1; }
if ! alive "$STATE/munged.pid" || ! munge_ok; then
  rm -f "$SOCK" "$SOCK.lock"
  runuser -u munge -- /usr/sbin/munged --socket="$SOCK" --pid-file="$STATE/munge/munged.pid" \
    --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed" 2>>"$STATE/munged.err" \
    || die "munged failed to start: $(tail -n 3 "$STATE/munged.err")"
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munged started but munge -S $SOCK -n | unmunge fails"
  cp "$STATE/munge/munged.pid" "$STATE/munged.pid"
  log "munged started (pid $(cat "$STATE/munged.pid"), socket $SOCK)"
fi

# ----------------------------------------------------------------------------------------------- daemons
NEW_CONF=$(make_conf)
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script"
fi
CONF_CHANGED=0
if [ ! -e "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
  echo "$NEW_CONF" > "$CONF"; chmod 644 "$CONF"; CONF_CHANGED=1; log "wrote $CONF"
fi
if alive "$STATE/slurmctld.pid" && [ $CONF_CHANGED = 1 ]; then
  log "configuration changed: scontrol reconfigure"; scontrol reconfigure || true
fi
if ! alive "$STATE/slurmctld.pid"; then   # empty queue, as slurm/cluster_up.sh (see there)
  slurmctld -c -f "$CONF" 2>>"$STATE/slurmctld.err" || die "slurmctld failed; see $STATE/slurmctld.log, .err"
  for _ in $(seq 50); do alive "$STATE/slurmctld.pid" && break; sleep 0.1; done
  alive "$STATE/slurmctld.pid" || die "slurmctld exited; see $STATE/slurmctld.log"
  log "slurmctld started (pid $(cat "$STATE/slurmctld.pid"), $NET.254:$PORT)"
fi
for node in "${NODES[@]}"; do
  f="$STATE/slurmd.$node.pid"
  if ! alive "$f"; then
    in_node "$node" env SLURM_CONF="$CONF" slurmd -N "$node" -f "$CONF" 2>>"$STATE/slurmd.$node.err" \
      || die "slurmd $node failed to start; see $STATE/slurmd.$node.log and .err"
    for _ in $(seq 50); do alive "$f" && break; sleep 0.1; done
    alive "$f" || die "slurmd $node exited; see $STATE/slurmd.$node.log"
    log "slurmd $node started in netns $node (pid $(cat "$f"))"
  fi
done

# ------------------------------------------------------------------------------------------ wait for idle
deadline=$(( $(date +%s) + TIMEOUT )); resumed=0
until all_usable; do
  if [ $resumed = 0 ] && node_states | grep -Eq ' (down|drained|draining|fail|failing)$'; then
    scontrol update NodeName="$(IFS=,; echo "${NODES[*]}")" State=RESUME >/dev/null 2>&1 || true; resumed=1
  fi
  if [ "$(date +%s)" -ge $deadline ]; then
    echo "[cluster_netns_up] ERROR: nodes not idle after ${TIMEOUT}s: $(node_states | tr '\n' ' ')" >&2
    tail -n 5 "$STATE/slurmctld.log" >&2 2>/dev/null || true
    for node in "${NODES[@]}"; do tail -n 5 "$STATE/slurmd.$node.log" >&2 2>/dev/null || true; done
    exit 1
  fi
  sleep 0.5
done
T1=$(date +%s.%N)
log "up: $(node_states | tr '\n' ' ')partition netns ($(awk "BEGIN{printf \"%.1f\", $T1-$T0}") s)"
log "clients: export SLURM_CONF=$CONF"

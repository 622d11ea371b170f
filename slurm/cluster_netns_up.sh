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
IFNAME=armor0
SOCK="$STATE/munge/munge.socket.2"
T0=$(date +%s.%N)
export SLURM_CONF="$CONF"

LOG_NAME=cluster_netns_up
. "$(dirname "$0")/cluster_lib.sh"
NODES=("${NETNS_NODES[@]}")    # node i has address $NET.i
BR=$NETNS_BRIDGE
MARK=$NETNS_MARK
[ "$(id -u)" = 0 ] || die "must run as root (it creates namespaces, installs packages and starts daemons)"

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
$(conf_common)
AuthInfo=socket=$SOCK,cred_expire=10
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
install_missing ip:iproute2 munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client
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
munge_key
mkdir -p "$STATE/munge"
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
  start_daemon slurmctld "$STATE/slurmctld.pid" slurmctld -c -f "$CONF"
  log "slurmctld started (pid $(cat "$STATE/slurmctld.pid"), $NET.254:$PORT)"
fi
for node in "${NODES[@]}"; do
  f="$STATE/slurmd.$node.pid"
  if ! alive "$f"; then
    start_daemon "slurmd $node" "$f" in_node "$node" env SLURM_CONF="$CONF" slurmd -N "$node" -f "$CONF"
    log "slurmd $node started in netns $node (pid $(cat "$f"))"
  fi
done

# ------------------------------------------------------------------------------------------ wait for idle
logs=("$STATE/slurmctld.log"); for node in "${NODES[@]}"; do logs+=("$STATE/slurmd.$node.log"); done
wait_usable "$TIMEOUT" "${logs[@]}"
T1=$(date +%s.%N)
log "up: $(node_states | tr '\n' ' ')partition netns ($(awk "BEGIN{printf \"%.1f\", $T1-$T0}") s)"
log "clients: export SLURM_CONF=$CONF"

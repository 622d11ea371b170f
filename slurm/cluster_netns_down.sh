#!/usr/bin/env bash
# Stop what slurm/cluster_netns_up.sh started (by the PIDs it recorded) and remove its network (namespaces,
# veth pairs, bridge, /etc/netns/<node>); idempotent. Packages, slurm.conf and the state folders stay. The
# single-node cluster of slurm/cluster_up.sh is not touched.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
STATE="${ARMOR_NETNS_STATE:-/var/run/armor-netns}"
NODES=(armor-n1 armor-n2)
BR=armor-nsbr
MARK="# written by armor-repro slurm/cluster_netns_up.sh"

stop() {  # stop NAME PIDFILE
  local name="$1" f="$2" pid
  [ -s "$f" ] || { echo "[cluster_netns_down] $name: not running (no $f)"; return 0; }
  pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; sleep 0.2; fi
    echo "[cluster_netns_down] $name stopped (pid $pid)"
  else
    echo "[cluster_netns_down] $name was not running (stale pid $pid)"
  fi
  rm -f "$f"
}

for node in "${NODES[@]}"; do stop "slurmd $node" "$STATE/slurmd.$node.pid"; done
stop slurmctld "$STATE/slurmctld.pid"
stop munged "$STATE/munged.pid"
for node in "${NODES[@]}"; do
  ip link del "${node}h" 2>/dev/null && echo "[cluster_netns_down] veth ${node}h removed"
  [ -e "/var/run/netns/$node" ] && ip netns del "$node" && echo "[cluster_netns_down] netns $node removed"
  if [ -f "/etc/netns/$node/hosts" ] && grep -qF "$MARK" "/etc/netns/$node/hosts"; then
    rm -f "/etc/netns/$node/hosts"; rmdir "/etc/netns/$node" 2>/dev/null
  fi
done
ip link del "$BR" 2>/dev/null && echo "[cluster_netns_down] bridge $BR removed"
exit 0

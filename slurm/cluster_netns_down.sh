#!/usr/bin/env bash
# Stop what slurm/cluster_netns_up.sh started (by the PIDs it recorded) and remove its network (namespaces,
# veth pairs, bridge, /etc/netns/<node>); idempotent. Packages, slurm.conf and the state folders stay. The
# single-node cluster of slurm/cluster_up.sh is not touched.
set -uo pipefail
STATE="${ARMOR_NETNS_STATE:-/var/run/armor-netns}"

LOG_NAME=cluster_netns_down
. "$(dirname "$0")/cluster_lib.sh"
NODES=("${NETNS_NODES[@]}")    # node i has address $NET.i
BR=$NETNS_BRIDGE
MARK=$NETNS_MARK

for node in "${NODES[@]}"; do stop "slurmd $node" "$STATE/slurmd.$node.pid"; done
stop slurmctld "$STATE/slurmctld.pid"
stop munged "$STATE/munged.pid"
for node in "${NODES[@]}"; do
  ip link del "${node}h" 2>/dev/null && log "veth ${node}h removed"
  [ -e "/var/run/netns/$node" ] && ip netns del "$node" && log "netns $node removed"
  if [ -f "/etc/netns/$node/hosts" ] && grep -qF "$MARK" "/etc/netns/$node/hosts"; then
    rm -f "/etc/netns/$node/hosts"; rmdir "/etc/netns/$node" 2>/dev/null
  fi
done
ip link del "$BR" 2>/dev/null && log "bridge $BR removed"
exit 0

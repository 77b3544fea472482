#!/bin/bash
# Create the local node's pod bridge $BR with the gateway address $PODNET.1/24 (up.sh runs this
# before its dnsmasq and kubelet start).
#
# A bridge left by a node that was killed rather than taken down still carries its pods' network
# namespaces (kept alive by their mounts), which hold the addresses this node's fresh IPAM hands out
# again: a new etcd pod at 10.245.0.3 would share its address with a dead one, and every bookie would
# crash-loop. Such a bridge is deleted; one a running node still uses (its dnsmasq or kubelet names
# the gateway address) is refused.
set -euo pipefail
BR=${BR:-e2e0}; PODNET=${PODNET:-10.245.0}
if ip link show "$BR" >/dev/null 2>&1; then
  gw="${PODNET//./\\.}\\.1( |\$)"
  if pgrep -f -- "--listen-address=$gw" >/dev/null || pgrep -f -- "--cluster-dns=$gw" >/dev/null; then
    echo "up: another local node runs on bridge $BR ($PODNET.0/24); run its down.sh first" >&2; exit 1
  fi
  echo "up: deleting bridge $BR left by a node that was not taken down"; ip link del "$BR"
fi
ip link add "$BR" type bridge && ip addr add "$PODNET.1/24" dev "$BR" && ip link set "$BR" up

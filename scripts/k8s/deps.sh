#!/bin/bash
# Debian packages the Kubernetes harness needs.
#   ./deps.sh control-plane   etcd, openssl, curl: enough for up-control-plane.sh (operator tests)
#   ./deps.sh                 everything up.sh needs for a whole node (containerd, runc, CNI, DNS, podman),
#                             and Java 17 for the Spark job tests (PySpark runs local Spark on it)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs="etcd-server openssl curl"
[[ ${1:-node} == control-plane ]] || pkgs="$pkgs containerd runc containernetworking-plugins iptables conntrack \
  dnsmasq-base podman buildah debootstrap uidmap slirp4netns fuse-overlayfs openjdk-17-jre-headless"
missing=$(for p in $pkgs; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"; done)
[[ -z $missing ]] && { echo "deps: all installed"; exit 0; }
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: installed $(echo $missing)"

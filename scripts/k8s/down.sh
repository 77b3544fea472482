#!/bin/bash
# Tear down what up-control-plane.sh or up.sh started in $R: stop processes by their recorded pid
# (never by name), and for a whole node also unmount, clean iptables and the bridge, restore sysctls.
# CLEAN=1 also removes the run directory.
HERE=$(dirname "$(readlink -f "$0")")
K8S_HOME=${K8S_HOME:-$HOME/.cache/k8s-local/1.20.2}; BIN=${BIN:-$K8S_HOME/bin}
R=${R:-${TMPDIR:-/tmp}/magnetar-k8s/cp}; BR=${BR:-e2e0}
cd "$R" 2>/dev/null || exit 0
alive(){ [[ -f pid/$1 ]] && kill -0 "$(cat "pid/$1")" 2>/dev/null; }
stop(){ for n in "$@"; do if alive "$n"; then kill "$(cat "pid/$n")"; for _ in $(seq 50); do alive "$n" || break; sleep 0.1; done; alive "$n" && kill -9 "$(cat "pid/$n")"; fi; rm -f "pid/$n"; done; }
node=0; [[ -f pid/containerd || -f sysctl.orig ]] && node=1
if ((node)); then
  K="$BIN/kubectl --kubeconfig=$R/admin.kubeconfig --request-timeout=5s"
  C="ctr -a $R/ctd/containerd.sock -n k8s.io"
  if alive apiserver && alive kubelet; then
    for ns in $($K get ns -o jsonpath='{.items[*].metadata.name}'); do
      $K -n "$ns" delete deploy,sts,ds,rs,job,cronjob --all --wait=false >/dev/null 2>&1
      $K -n "$ns" delete pods --all --grace-period=1 --wait=false >/dev/null 2>&1
    done
    for _ in $(seq 60); do [[ -z "$($C tasks ls -q 2>/dev/null)" ]] && break; sleep 0.5; done
  fi
fi
stop dnssync dnsmasq kubelet proxy sched kcm apiserver etcd
if ((node)); then
  for t in $($C tasks ls -q 2>/dev/null); do $C tasks kill -s KILL "$t" >/dev/null 2>&1; done; sleep 0.5
  for t in $($C tasks ls -q 2>/dev/null); do $C tasks rm -f "$t" >/dev/null 2>&1; done
  for c in $($C containers ls -q 2>/dev/null); do $C containers rm "$c" >/dev/null 2>&1; done
  stop containerd
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $R/ctd/containerd.sock"); do kill "$p"; done
  mount | awk -v r="$R/" 'index($3, r)==1 {print $3}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  "$BIN/kube-proxy" --cleanup >/dev/null 2>&1
  "$HERE/ipt_cleanup.sh"
  ip link del "$BR" 2>/dev/null
  rm -rf /var/log/pods /var/log/containers; rmdir /run/containerd/s /run/containerd/fifo /run/containerd 2>/dev/null
  [[ -f sysctl.orig ]] && sysctl -q -w $(cat sysctl.orig) && rm -f sysctl.orig
  echo "down: remaining mounts under $R: $(mount | grep -c "$R/")"
fi
cd / && [[ ${CLEAN:-0} == 1 ]] && rm -rf "$R"
echo "down: stopped ($R)"

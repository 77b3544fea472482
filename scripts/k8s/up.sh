#!/bin/bash
# Bring up a single-node real Kubernetes 1.20 cluster (etcd + apiserver + kcm + scheduler + kubelet/containerd + kube-proxy + dnsmasq DNS).
# Everything lives under $R. Needs the packages deps.sh installs and the binaries build.sh makes.
# IMAGES="localhost/name=/path/image.oci.tar ..." imports OCI archives (podman save --format oci-archive)
# into the node's containerd; pods use them with imagePullPolicy: Never.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
K8S_HOME=${K8S_HOME:-$HOME/.cache/k8s-local/1.20.2}; BIN=${BIN:-$K8S_HOME/bin}; R=${R:-${TMPDIR:-/tmp}/magnetar-k8s/node}
ETCD_PORT=${ETCD_PORT:-23792}; API_PORT=${API_PORT:-16445}; PODNET=${PODNET:-10.245.0}; SVCNET=${SVCNET:-10.98}
mkdir -p $R/{pki,logs,pid,ctd/root,ctd/state,ctd/opt,cni,kubelet/volume-plugins,dns,etcd}
cd $R
t0=$(date +%s%N); lap(){ local ms=$(( ($(date +%s%N) - t0) / 1000000 )); echo "[$((ms / 1000)).$((ms % 1000 / 100))s] $*"; }
bg(){ local name=$1; shift; nohup setsid "$@" > logs/$name.log 2>&1 & echo $! > pid/$name; }
# A wait that fails the script (and says what it waited for) instead of falling through.
wait_until(){ local limit=$1 what=$2; shift 2; local end=$(( $(date +%s) + limit ))
  until "$@"; do (( $(date +%s) < end )) || { echo "up: gave up after ${limit}s waiting for $what" >&2; exit 1; }; sleep 0.25; done; }
# A node left in $R would answer for the new one (its etcd, its Ready status): refuse to reuse it.
for p in pid/*; do [ -f "$p" ] && kill -0 "$(cat "$p")" 2>/dev/null && { echo "up: $R already runs a node ($p); run down.sh first" >&2; exit 1; }; done
if [ -d etcd/member ] && [ "${REUSE:-0}" != 1 ]; then echo "up: $R holds an old node's state; run down.sh with CLEAN=1 (or set REUSE=1)" >&2; exit 1; fi
# kubelet/kube-proxy/CNI change these sysctls; down.sh restores them
[ -f sysctl.orig ] || for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops net.ipv4.ip_forward net.ipv4.conf.all.route_localnet; do echo "$k=$(sysctl -n $k)"; done > sysctl.orig
# --- PKI + tokens
if [ ! -f pki/ca.crt ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout pki/ca.key -out pki/ca.crt -days 30 -subj /CN=k8s-local-ca 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:%s,IP:%s.0.1\n' "$(hostname -I | awk '{print $1}')" "$SVCNET" > pki/ext
  openssl req -newkey rsa:2048 -nodes -keyout pki/apiserver.key -out pki/apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
  openssl x509 -req -in pki/apiserver.csr -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial -out pki/apiserver.crt -days 30 -extfile pki/ext 2>/dev/null
  openssl genrsa -out pki/sa.key 2048 2>/dev/null; openssl rsa -in pki/sa.key -pubout -out pki/sa.pub 2>/dev/null
  : > tokens.csv
  for u in admin:system:masters node:system:nodes kcm: sched: proxy:; do
    n=${u%%:*}; g=${u#*:}; t=$(openssl rand -hex 16)
    case $n in admin) user=admin;; node) user=system:node:$(hostname);; kcm) user=system:kube-controller-manager;; sched) user=system:kube-scheduler;; proxy) user=system:kube-proxy;; esac
    echo "$t,$user,$user${g:+,$g}" >> tokens.csv
    printf 'apiVersion: v1\nkind: Config\nclusters: [{name: e2e, cluster: {server: "https://127.0.0.1:%s", certificate-authority: %s/pki/ca.crt}}]\nusers: [{name: u, user: {token: "%s"}}]\ncontexts: [{name: e2e, context: {cluster: e2e, user: u}}]\ncurrent-context: e2e\n' $API_PORT $R $t > $n.kubeconfig
  done
  chmod 600 tokens.csv *.kubeconfig
fi
lap pki
# --- containerd (CRI, cgroupfs, runc, own socket/root)
containerd config default | sed -e "s#^root = .*#root = \"$R/ctd/root\"#" -e "s#^state = .*#state = \"$R/ctd/state\"#" \
  -e "s#address = \"/run/containerd/containerd.sock\"#address = \"$R/ctd/containerd.sock\"#" \
  -e 's#sandbox_image = .*#sandbox_image = "localhost/pause:3.4.1"#' -e 's#bin_dir = "/opt/cni/bin"#bin_dir = "/usr/lib/cni"#' \
  -e "s#conf_dir = \"/etc/cni/net.d\"#conf_dir = \"$R/cni\"#" -e 's#disable_apparmor = false#disable_apparmor = true#' \
  -e 's#restrict_oom_score_adj = false#restrict_oom_score_adj = true#' -e "s#path = \"/opt/containerd\"#path = \"$R/ctd/opt\"#" -e "s#netns_mounts_under_state_dir = false#netns_mounts_under_state_dir = true#" -e "s#^            Root = \"\"#            Root = \"$R/ctd/runc\"#" > ctd/config.toml
cat > cni/10-e2e.conflist <<J
{"cniVersion":"0.4.0","name":"e2enet","plugins":[{"type":"bridge","bridge":"e2e0","isGateway":true,"ipMasq":true,"hairpinMode":true,
 "ipam":{"type":"host-local","dataDir":"$R/cni/ipam","ranges":[[{"subnet":"$PODNET.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
J
bg containerd containerd --config $R/ctd/config.toml
wait_until 20 "containerd's socket (logs/containerd.log)" test -S ctd/containerd.sock
lap containerd
# --- images (OCI archives exported by podman)
for a in ${IMAGES:-}; do ctr -a ctd/containerd.sock -n k8s.io images import --base-name "${a%%=*}" "${a#*=}" >/dev/null; done
lap images
# --- etcd + control plane
bg etcd etcd --name e2e --data-dir $R/etcd --listen-client-urls http://127.0.0.1:$ETCD_PORT --advertise-client-urls http://127.0.0.1:$ETCD_PORT \
  --listen-peer-urls http://127.0.0.1:$((ETCD_PORT+10)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT+10)) --initial-cluster e2e=http://127.0.0.1:$((ETCD_PORT+10))
bg apiserver $BIN/kube-apiserver --etcd-servers=http://127.0.0.1:$ETCD_PORT --bind-address=0.0.0.0 --secure-port=$API_PORT \
  --tls-cert-file=pki/apiserver.crt --tls-private-key-file=pki/apiserver.key --client-ca-file=pki/ca.crt \
  --service-account-key-file=pki/sa.pub --service-account-signing-key-file=pki/sa.key --service-account-issuer=https://kubernetes.default.svc \
  --token-auth-file=tokens.csv --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-cluster-ip-range=$SVCNET.0.0/16 --allow-privileged=true --cert-dir=$R/pki
wait_until 60 "the API server to be ready (logs/apiserver.log)" sh -c "curl -sk -m 1 https://127.0.0.1:$API_PORT/readyz 2>/dev/null | grep -q '^ok'"
lap apiserver ready
bg kcm $BIN/kube-controller-manager --kubeconfig=kcm.kubeconfig --authentication-kubeconfig=kcm.kubeconfig --authorization-kubeconfig=kcm.kubeconfig \
  --bind-address=127.0.0.1 --secure-port=0 --port=0 --service-account-private-key-file=pki/sa.key --root-ca-file=pki/ca.crt \
  --use-service-account-credentials=true --service-cluster-ip-range=$SVCNET.0.0/16 --leader-elect=false --controllers='*,-nodeipam'
bg sched $BIN/kube-scheduler --kubeconfig=sched.kubeconfig --authentication-kubeconfig=sched.kubeconfig --authorization-kubeconfig=sched.kubeconfig \
  --bind-address=127.0.0.1 --secure-port=0 --port=0 --leader-elect=false
cat > proxy.yaml <<Y
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $R/proxy.kubeconfig}
mode: iptables
clusterCIDR: $PODNET.0/24
hostnameOverride: $(hostname)
bindAddress: 127.0.0.1
metricsBindAddress: 127.0.0.1:${PROXY_METRICS_PORT:-10349}
healthzBindAddress: 127.0.0.1:${PROXY_HEALTHZ_PORT:-10356}
conntrack: {maxPerCore: 0}
Y
bg proxy $BIN/kube-proxy --config=proxy.yaml
# --- DNS: dnsmasq on the bridge gateway + a Service/Endpoints -> hosts-file feeder
: > dns/hosts
BR=e2e0 PODNET=$PODNET bash $HERE/bridge.sh
bg dnsmasq dnsmasq --keep-in-foreground --no-resolv --server=$(awk '/^nameserver/{print $2; exit}' /etc/resolv.conf) --listen-address=$PODNET.1 \
  --bind-interfaces --no-hosts --addn-hosts=$R/dns/hosts --local=/cluster.local/ --pid-file= --user=root
KC=$R/admin.kubeconfig CA=$R/pki/ca.crt HOSTS=$R/dns/hosts DNSPIDF=$R/pid/dnsmasq bg dnssync python3 $HERE/dns_sync.py
bg kubelet $BIN/kubelet --kubeconfig=$R/node.kubeconfig --container-runtime=remote --container-runtime-endpoint=unix://$R/ctd/containerd.sock \
  --runtime-request-timeout=5m --cgroup-driver=cgroupfs --root-dir=$R/kubelet --cert-dir=$R/kubelet/pki --volume-plugin-dir=$R/kubelet/volume-plugins \
  --fail-swap-on=false --hostname-override=$(hostname) --address=127.0.0.1 --read-only-port=0 --healthz-port=0 --image-gc-high-threshold=100 \
  --eviction-hard='nodefs.available<1%,imagefs.available<1%,memory.available<100Mi' --cluster-dns=$PODNET.1 --cluster-domain=cluster.local
K="$BIN/kubectl --kubeconfig=$R/admin.kubeconfig"
wait_until 120 "node $(hostname) to be Ready (logs/kubelet.log)" sh -c "$K get node $(hostname) -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' 2>/dev/null | grep -q True"
lap node Ready
lap "done (kubeconfig: $R/admin.kubeconfig)"

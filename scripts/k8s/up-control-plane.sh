#!/bin/bash
# A Kubernetes 1.20 control plane without a node: etcd + kube-apiserver + kube-controller-manager on
# loopback, token authentication, and an admin kubeconfig at $R/admin.kubeconfig.
#
# Enough for operator tests: custom resources, StatefulSets, Services, PodDisruptionBudgets, owner
# references and garbage collection (the controller manager's garbage collector) all work. Pods
# are never scheduled because there is no kubelet; use up.sh for a whole node.
#
# Every knob is an environment variable so that tests can run several planes side by side:
#   R           run directory (pki, tokens, logs, pids, etcd data)   default $TMPDIR/magnetar-k8s/cp
#   ETCD_PORT   etcd client port (peer port is ETCD_PORT+1)          default 23892 (not 2379)
#   API_PORT    kube-apiserver secure port                            default 16545
#   WITH_KCM    0 to skip the controller manager                      default 1
# Ports default away from Magnetar's own (6650, 8080, 3181, 2379) and from up.sh's.
set -euo pipefail
K8S_HOME=${K8S_HOME:-$HOME/.cache/k8s-local/1.20.2}; BIN=${BIN:-$K8S_HOME/bin}
R=${R:-${TMPDIR:-/tmp}/magnetar-k8s/cp}; ETCD_PORT=${ETCD_PORT:-23892}; API_PORT=${API_PORT:-16545}
SVCNET=${SVCNET:-10.97}; WITH_KCM=${WITH_KCM:-1}; ETCD=${ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
for b in "$BIN/kube-apiserver" "$ETCD"; do [[ -x $b ]] || { echo "up-control-plane: missing $b (run build.sh / deps.sh control-plane)" >&2; exit 2; }; done
mkdir -p "$R"/{pki,logs,pid,etcd}
cd "$R"
t0=$(date +%s%N); lap(){ local ms=$(( ($(date +%s%N) - t0) / 1000000 )); echo "[$((ms / 1000)).$((ms % 1000 / 100))s] $*"; }
bg(){ local name=$1; shift; nohup setsid "$@" >"logs/$name.log" 2>&1 & echo $! >"pid/$name"; }
fail(){ echo "up-control-plane: $*" >&2; tail -15 "logs/$2.log" >&2 || true; exit 1; }
# --- PKI and tokens (once per run directory)
if [[ ! -f pki/ca.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout pki/ca.key -out pki/ca.crt -days 30 -subj /CN=magnetar-k8s-ca 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost,IP:127.0.0.1,IP:%s.0.1\n' "$SVCNET" >pki/ext
  openssl req -newkey rsa:2048 -nodes -keyout pki/apiserver.key -out pki/apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
  openssl x509 -req -in pki/apiserver.csr -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial -out pki/apiserver.crt -days 30 -extfile pki/ext 2>/dev/null
  openssl genrsa -out pki/sa.key 2048 2>/dev/null; openssl rsa -in pki/sa.key -pubout -out pki/sa.pub 2>/dev/null
  : >tokens.csv
  for n in admin kcm; do
    t=$(openssl rand -hex 16)
    case $n in admin) echo "$t,admin,admin,system:masters" >>tokens.csv ;; kcm) echo "$t,system:kube-controller-manager,system:kube-controller-manager" >>tokens.csv ;; esac
    printf 'apiVersion: v1\nkind: Config\nclusters: [{name: magnetar, cluster: {server: "https://127.0.0.1:%s", certificate-authority: %s/pki/ca.crt}}]\nusers: [{name: u, user: {token: "%s"}}]\ncontexts: [{name: magnetar, context: {cluster: magnetar, user: u}}]\ncurrent-context: magnetar\n' "$API_PORT" "$R" "$t" >$n.kubeconfig
  done
  chmod 600 tokens.csv ./*.kubeconfig
fi
lap pki
# --- etcd
bg etcd "$ETCD" --name magnetar --data-dir "$R/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-cluster "magnetar=http://127.0.0.1:$((ETCD_PORT + 1))" \
  --quota-backend-bytes=$((512 * 1024 * 1024)) --unsafe-no-fsync
for _ in $(seq 200); do curl -s -m 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q true && break; kill -0 "$(cat pid/etcd)" 2>/dev/null || fail "etcd exited" etcd; sleep 0.1; done
lap etcd ready
# --- kube-apiserver (RBAC on, like a real cluster, so that the operator's RBAC can be tested later)
bg apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" --bind-address=127.0.0.1 --secure-port="$API_PORT" \
  --tls-cert-file=pki/apiserver.crt --tls-private-key-file=pki/apiserver.key --client-ca-file=pki/ca.crt \
  --service-account-key-file=pki/sa.pub --service-account-signing-key-file=pki/sa.key --service-account-issuer=https://kubernetes.default.svc \
  --token-auth-file=tokens.csv --authorization-mode=RBAC --service-cluster-ip-range="$SVCNET.0.0/16" \
  --cert-dir="$R/pki" --advertise-address=127.0.0.1 --endpoint-reconciler-type=none --enable-priority-and-fairness=false
for _ in $(seq 480); do curl -sk -m 1 "https://127.0.0.1:$API_PORT/readyz" 2>/dev/null | grep -q '^ok' && break; kill -0 "$(cat pid/apiserver)" 2>/dev/null || fail "kube-apiserver exited" apiserver; sleep 0.25; done
curl -sk -m 1 "https://127.0.0.1:$API_PORT/readyz" | grep -q '^ok' || fail "kube-apiserver not ready in 120 s" apiserver
lap apiserver ready
# --- kube-controller-manager: garbage collector (cascading deletion), statefulset, serviceaccount-token, ...
if [[ $WITH_KCM == 1 && -x $BIN/kube-controller-manager ]]; then
  bg kcm "$BIN/kube-controller-manager" --kubeconfig=kcm.kubeconfig --authentication-kubeconfig=kcm.kubeconfig \
    --authorization-kubeconfig=kcm.kubeconfig --bind-address=127.0.0.1 --secure-port=0 --port=0 \
    --service-account-private-key-file=pki/sa.key --root-ca-file=pki/ca.crt --use-service-account-credentials=true \
    --service-cluster-ip-range="$SVCNET.0.0/16" --leader-elect=false --controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle'
  lap kcm started
fi
lap "done (kubeconfig: $R/admin.kubeconfig)"

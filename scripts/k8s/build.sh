#!/bin/bash
# Build real Kubernetes 1.20.2 binaries (apiserver, controller-manager, scheduler, kubelet, kube-proxy,
# kubectl) and the pause binary from Debian's `kubernetes` source package, with Debian's Go.
# The vendored reflect2 1.0.1 / json-iterator 1.1.10 crash the apiserver on the first custom resource
# under Go >= 1.18, so they are replaced by Debian's 1.0.2 / 1.1.12 sources before building.
# Idempotent: does nothing when every binary is already in $K8S_HOME/bin. About 8 minutes on 2 cores.
# The cache lives outside the work tree, keyed by version, so every checkout and CI job on a machine shares it.
set -euo pipefail
K8S_HOME=${K8S_HOME:-$HOME/.cache/k8s-local/1.20.2}
WHAT=${WHAT:-"cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet cmd/kube-proxy cmd/kubectl"}
# NEED: the binaries that must exist for this run to count as done (all of them by default).
read -r -a need <<<"${NEED:-kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl pause}"
missing=0; for b in "${need[@]}"; do [[ -x $K8S_HOME/bin/$b ]] || missing=1; done
((missing)) || { echo "k8s-local: binaries present in $K8S_HOME/bin"; exit 0; }
mkdir -p "$K8S_HOME/bin" "$K8S_HOME/src"
if ! grep -qs '^Types: deb-src' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null; then
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >/etc/apt/sources.list.d/debian-src.sources
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends golang-go dpkg-dev rsync gcc libc6-dev \
  golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev >/dev/null
cd "$K8S_HOME/src"
rm -rf kubernetes-*/
apt-get source -qq kubernetes >/dev/null
tree=$(ls -d kubernetes-*/ | head -1); tree=${tree%/}
for pair in modern-go/reflect2 json-iterator/go; do
  find "$tree/vendor/github.com/$pair" -maxdepth 1 -name '*.go' -delete
  find "/usr/share/gocode/src/github.com/$pair" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$tree/vendor/github.com/$pair/" \;
done
cd "$tree"
mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
GOPATH=$PWD/.go CGO_ENABLED=0 HOME=$K8S_HOME/home make WHAT="$WHAT" >"$K8S_HOME/build.log" 2>&1 || { tail -20 "$K8S_HOME/build.log"; exit 1; }
cp _output/bin/kube-apiserver _output/bin/kube-controller-manager _output/bin/kube-scheduler \
   _output/bin/kubelet _output/bin/kube-proxy _output/bin/kubectl "$K8S_HOME/bin/"
gcc -Os -static -DVERSION=v3.4.1-local -o "$K8S_HOME/bin/pause" build/pause/linux/pause.c
cd "$K8S_HOME" && [[ ${KEEP_SRC:-0} == 1 ]] || rm -rf "$K8S_HOME/src"   # the tree's build cache is ~3 GB
echo "k8s-local: built into $K8S_HOME/bin"

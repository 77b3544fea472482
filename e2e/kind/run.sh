#!/bin/bash
# Run the end-to-end suite on a kind cluster: create it, load the images images/build.sh saved as
# OCI archives (the same archives the local node imports), run `pytest -m e2e e2e/` against its
# kubeconfig, delete the cluster. Needs docker (or podman) and kind on PATH.
#   e2e/kind/run.sh [pytest args...]      KEEP=1 keeps the cluster afterwards
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")"); ROOT=$(readlink -f "$HERE/../..")
NAME=magnetar-e2e
CACHE=${MAGNETAR_IMAGE_CACHE:-$HOME/.cache/magnetar/images}
bash "$ROOT/images/build.sh"
# shellcheck disable=SC1091
source "$CACHE/images.env"
kind get clusters | grep -qx "$NAME" || kind create cluster --config "$HERE/kind-config.yaml" --wait 120s
trap '[[ ${KEEP:-0} == 1 ]] || kind delete cluster --name "$NAME"' EXIT
for pair in $IMAGES; do
  case ${pair%%=*} in localhost/pause) continue ;; esac  # kind brings its own pause image
  kind load image-archive "${pair#*=}" --name "$NAME"
done
KCFG=$(mktemp); kind get kubeconfig --name "$NAME" > "$KCFG"
cd "$ROOT"
MAGNETAR_E2E_KUBECONFIG=$KCFG MAGNETAR_E2E_STORAGE_CLASS=standard MAGNETAR_E2E_IMAGE_TAG=$MAGNETAR_IMAGE_TAG \
  python3 -m pytest -m e2e e2e "$@"

#!/bin/bash
# Build Magnetar's images with podman and save each as an OCI archive for scripts/k8s/up.sh:
#   localhost/magnetar:<tag>  localhost/magnetar-operator:<tag>  localhost/magnetar-spark:<tag>
# <tag> is a content hash: the first 12 hex of a sha256 over the files of images/, services/, operator/,
# pyproject.toml and README.md (git-tracked or untracked-but-not-ignored; caches and bytecode never count),
# so the same sources give the same tag on every machine, and a tag whose archive exists is neither
# rebuilt nor saved again (only loaded into podman if podman lost it).
#
#   images/build.sh                    # all three;  ONLY="server operator" images/build.sh: just those
#   . "${MAGNETAR_IMAGE_CACHE:-$HOME/.cache/magnetar/images}/images.env"   # MAGNETAR_IMAGE_TAG, IMAGES
#
# Archives: $MAGNETAR_IMAGE_CACHE/<name>-<tag>.oci.tar (default ~/.cache/magnetar/images; the newest
# $KEEP tags of each image are kept, default 3). images.env there has MAGNETAR_IMAGE_TAG and IMAGES in
# up.sh's format, the pause image included. Podman's layer cache stays in ~/.cache/k8s-local/podman (see
# scripts/k8s/podman.sh), so after a code change only the last two layers of each image are rebuilt.
# Needs scripts/k8s/deps.sh (podman); builds the base image with scripts/k8s/base-images.sh if missing.
# The last line printed is MAGNETAR_IMAGE_TAG=<tag>.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
ROOT=$(dirname "$HERE")
PM="$ROOT/scripts/k8s/podman.sh"
K8S_HOME=${K8S_HOME:-$HOME/.cache/k8s-local/1.20.2}
CACHE=${MAGNETAR_IMAGE_CACHE:-$HOME/.cache/magnetar/images}
KEEP=${KEEP:-3}
BASE=localhost/bookworm-minbase:latest
CA=/etc/ssl/certs/ca-certificates.crt
read -r -a only <<<"${ONLY:-server operator spark}"
declare -A repo=([server]=localhost/magnetar [operator]=localhost/magnetar-operator [spark]=localhost/magnetar-spark)
command -v podman >/dev/null || { echo "images/build.sh: podman is missing; run scripts/k8s/deps.sh" >&2; exit 1; }
for name in "${only[@]}"; do
  [[ -n ${repo[$name]:-} ]] || { echo "images/build.sh: unknown image '$name' in ONLY (server, operator, spark)" >&2; exit 2; }
done

# The inputs, NUL-separated paths relative to ROOT, sorted.
inputs() {
  local paths=(images services operator pyproject.toml setup.py README.md)
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard -- "${paths[@]}"
  else
    (cd "$ROOT" && find "${paths[@]}" \( -name __pycache__ -o -name '*.egg-info' -o -name '.*_cache' \) -prune \
      -o -type f ! -name '*.pyc' ! -name '*.so' -print0)
  fi | (cd "$ROOT" && while IFS= read -r -d '' f; do if [[ -f $f ]]; then printf '%s\0' "$f"; fi; done) | LC_ALL=C sort -zu
}
cd "$ROOT"
mapfile -d '' files < <(inputs)
# Content and executable bit of every file, under its path.
tag=$( { printf '%s\0' "${files[@]}" | xargs -0 sha256sum
         for f in "${files[@]}"; do if [[ -x $f ]]; then echo "+x $f"; fi; done; } | sha256sum | cut -c1-12)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)
revision=unknown source=${MAGNETAR_IMAGE_SOURCE:-unknown}
if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  revision=$(git rev-parse HEAD)
  [[ -z $(git status --porcelain -- images services operator pyproject.toml README.md) ]] || revision+=-dirty
  [[ -n ${MAGNETAR_IMAGE_SOURCE:-} ]] || source=$(git remote get-url origin 2>/dev/null || echo unknown)
fi

# The OCI labels every image carries (each Containerfile target adds its title and description).
oci=org.opencontainers.image
labels=(--label "$oci.version=$version" --label "$oci.revision=$revision" --label "$oci.source=$source"
        --label "$oci.licenses=NOASSERTION" --label "$oci.vendor=Magnetar project")

mkdir -p "$CACHE"
archive() { echo "$CACHE/${repo[$1]#localhost/}-$tag.oci.tar"; }
secs() { echo $(( $(date +%s) - $1 )); }
total=$(date +%s) ctx=""
trap 'rm -rf "${ctx:-/nonexistent}" "$CACHE"/*.tmp.$$' EXIT
echo "images/build.sh: tag $tag (${#files[@]} input files), cache $CACHE"
for name in "${only[@]}"; do
  image="${repo[$name]}:$tag" out=$(archive "$name") start=$(date +%s)
  if [[ -f $out ]]; then
    if "$PM" image exists "$image"; then
      echo "$image: cached ($out)"
    else
      "$PM" load -q -i "$out" >/dev/null; echo "$image: loaded from $out in $(secs "$start")s"
    fi
    continue
  fi
  if [[ -z $ctx ]]; then
    if ! "$PM" image exists "$BASE"; then
      "$ROOT/scripts/k8s/base-images.sh"; echo "base images built in $(secs "$start")s"; start=$(date +%s)
    fi
    # The build context: exactly the hashed files, with one fixed mtime (buildah's COPY cache hashes it).
    ctx=$(mktemp -d)
    printf '%s\0' "${files[@]}" | tar --null -T - -cf - | tar -xf - -C "$ctx"
    find "$ctx" -exec touch -h -d @946684800 {} +
  fi
  # pip trusts the host's CA bundle (proxies that re-sign TLS); mounted beside, not over, the image's own.
  mounts=(); if [[ -f $CA ]]; then mounts=(-v "$CA:/run/host-ca-certificates.crt:ro" --build-arg PIP_CERT=/run/host-ca-certificates.crt); fi
  "$PM" build --layers --pull=never -f "$ctx/images/Containerfile" --target "$name" -t "$image" "${mounts[@]}" \
    "${labels[@]}" "$ctx" >"$CACHE/build-$name.log" 2>&1 || { tail -30 "$CACHE/build-$name.log" >&2; exit 1; }
  built=$(secs "$start")
  "$PM" save -q --format oci-archive -o "$out.tmp.$$" "$image"; mv "$out.tmp.$$" "$out"
  echo "$image: built in ${built}s, saved in $(( $(secs "$start") - built ))s -> $out"
  # Older tags of this image: archives beyond the newest $KEEP, and their podman images.
  mapfile -t old < <(ls -1t "$CACHE/${repo[$name]#localhost/}"-????????????.oci.tar 2>/dev/null | tail -n +$((KEEP + 1)))
  for o in "${old[@]}"; do
    t=${o%.oci.tar}; t=${t##*-}
    rm -f "$o"; "$PM" rmi "${repo[$name]}:$t" >/dev/null 2>&1 || true
  done
done

images="localhost/pause=$K8S_HOME/images/pause.oci.tar"
for name in server operator spark; do
  out=$(archive "$name"); if [[ -f $out ]]; then images+=" ${repo[$name]}=$out"; fi
done
printf 'MAGNETAR_IMAGE_TAG=%s\nIMAGES="%s"\n' "$tag" "$images" >"$CACHE/images.env.tmp.$$"
mv "$CACHE/images.env.tmp.$$" "$CACHE/images.env"
for name in "${only[@]}"; do
  size=$("$PM" image inspect --format '{{.Size}}' "${repo[$name]}:$tag")
  printf '%-40s %5d MB\n' "${repo[$name]}:$tag" $(( size / 1000000 ))
done
echo "images/build.sh: done in $(secs "$total")s; $CACHE/images.env"
echo "MAGNETAR_IMAGE_TAG=$tag"

#!/usr/bin/env bash
# Builds the real Kubernetes control plane the integration tests start (issue 44): kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd and kwok, from the Go module proxy, pinned by
# tests/controlplane/go.mod and go.sum. Prints the directory holding the five binaries on stdout
# (everything else goes to stderr), so `bin=$(scripts/controlplane.sh)` works.
#
# The binaries land in $NODECYCLE_CONTROLPLANE_CACHE (default ~/.cache/nodecycle/controlplane)
# under a hash of go.mod, go.sum and this script: built once, reused while none changes (a cached
# call takes well under a second). A build that fails or is interrupted leaves no half directory.
# Cold, on 2 cores, the build takes minutes: docs/development.md, Tests, has the figures.
# Needs Go (the version tests/controlplane/go.mod names) and the module proxy (GOPROXY).
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
src=tests/controlplane
hash=$(cat "$src/go.mod" "$src/go.sum" "$self" | sha256sum | cut -c1-16)
root="${NODECYCLE_CONTROLPLANE_CACHE:-$HOME/.cache/nodecycle/controlplane}"
out="$root/$hash/bin"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "controlplane.sh: Go is not on PATH (tests/controlplane/go.mod names the version)" >&2
  exit 1
fi
echo "==> building the control plane (${binaries[*]}) into $out; cold this takes minutes" >&2
mkdir -p "$root/$hash"
tmp=$(mktemp -d "$root/$hash/bin.partial.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
# The release the components report (/version, --version), set the way Kubernetes' own build
# (hack/lib/version.sh) does; without it they say v0.0.0-master.
version=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$src/go.mod")
if ! [[ "$version" =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
  echo "controlplane.sh: no k8s.io/kubernetes version in $src/go.mod" >&2
  exit 1
fi
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=${BASH_REMATCH[1]}"
  ldflags+=" -X $pkg.gitMinor=${BASH_REMATCH[2]} -X $pkg.gitTreeState=clean"
done
# -trimpath and -s -w keep the binaries small and the build reproducible; nice keeps the machine
# usable; GOFLAGS=-mod=readonly fails instead of editing go.mod when it and go.sum disagree.
build() {
  (cd "$src" && GOFLAGS=-mod=readonly nice -n 10 go build -trimpath -ldflags="$ldflags" "$@")
}
build -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  sigs.k8s.io/kwok/cmd/kwok
build -o "$tmp/etcd" go.etcd.io/etcd/server/v3
for b in "${binaries[@]}"; do
  [ -x "$tmp/$b" ] || { echo "controlplane.sh: $b was not built" >&2; exit 1; }
done
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "==> control plane built in $((SECONDS - start)) s: $out" >&2
echo "$out"

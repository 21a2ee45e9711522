#!/usr/bin/env bash
# Builds the CSI sidecars and the snapshot controller of the Kubernetes
# test cluster's CSI stack (internal/testenv/kubeenv Options.CSI) from the
# Go module proxy (module tools/k8s/csi): csi-provisioner
# (external-provisioner), csi-snapshotter and snapshot-controller
# (external-snapshotter), and copies the snapshot.storage.k8s.io CRDs
# from the external-snapshotter client module into crd/ beside them.
# The CSI driver itself is berth's (kubeenv/csidriver), in the test.
# Cached like scripts/k8s-tools.sh, under a key of its own:
#   $BERTH_K8S_CACHE (default /var/cache/berth/k8s)/csi-<hash>/bin/
# built into a temp dir renamed in only when all linked; one build at a
# time (flock). The bin dir is written to $BERTH_K8S_CACHE/CURRENT-CSI
# and printed on stdout, the only thing printed there.
#   scripts/k8s-csi-tools.sh          build if missing, print the bin dir
#   scripts/k8s-csi-tools.sh --check  print the bin dir if cached, else exit 1
set -euo pipefail
main() {
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=readonly"

cache=${BERTH_K8S_CACHE:-/var/cache/berth/k8s}
mod=tools/k8s/csi
hash=$(cat "$mod"/go.mod "$mod"/go.sum "$mod"/tools.go "$0" | sha256sum | cut -c1-10)
dest="$cache/csi-$hash"
bins=(csi-provisioner csi-snapshotter snapshot-controller)
crds=(volumesnapshotclasses volumesnapshotcontents volumesnapshots)

cached() {
	local b
	for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
	for b in "${crds[@]}"; do [ -s "$dest/bin/crd/snapshot.storage.k8s.io_$b.yaml" ] || return 1; done
}
publish() {
	printf '%s\n' "$dest/bin" >"$cache/CURRENT-CSI.tmp.$$"
	mv -f "$cache/CURRENT-CSI.tmp.$$" "$cache/CURRENT-CSI"
	echo "$dest/bin"
}

if [ "${1:-}" = "--check" ]; then
	cached || exit 1
	echo "$dest/bin"
	exit 0
fi
mkdir -p "$cache"
if cached; then
	publish
	exit 0
fi
exec 9>"$cache/.lock-csi"
flock 9
if cached; then
	publish
	exit 0
fi

tmp=$(mktemp -d "$cache/.build-csi-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin/crd"
log() { echo "k8s-csi-tools: $*" >&2; }
t0=$(date +%s)
step() { # name pkg
	local s
	s=$(date +%s)
	log "building $1 ..."
	(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$tmp/bin/$1" "$2")
	log "built $1 in $(($(date +%s) - s))s"
}
step snapshot-controller github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
step csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
step csi-provisioner github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
client=$(cd "$mod" && go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)
for c in "${crds[@]}"; do
	cp "$client/config/crd/snapshot.storage.k8s.io_$c.yaml" "$tmp/bin/crd/"
done
cat >"$tmp/VERSIONS" <<VERSIONS
$(cd "$mod" && go list -m -f '{{.Path}} {{.Version}}' github.com/kubernetes-csi/external-provisioner/v6 github.com/kubernetes-csi/external-snapshotter/v8 github.com/kubernetes-csi/external-snapshotter/client/v8)
go $(go env GOVERSION)
built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - t0))s
VERSIONS
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "all built in $(($(date +%s) - t0))s into $dest"
publish
}
main "$@"

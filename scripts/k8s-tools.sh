#!/usr/bin/env bash
# Builds the Kubernetes test cluster's binaries from the Go module proxy:
# kube-apiserver, kubelet, kube-scheduler, kube-controller-manager and
# kube-proxy (k8s.io/kubernetes, tools/k8s/kube), etcd (a
# wrapper main around go.etcd.io/etcd/server/v3/etcdmain, same module) and
# kwok (sigs.k8s.io/kwok, tools/k8s/kwok). The result is cached outside the
# clone, keyed by the Kubernetes version and a hash of the tools modules'
# go.mod/go.sum, so later runs on the same machine (and other clones) reuse
# it:
#   $BERTH_K8S_CACHE (default /var/cache/berth/k8s)/<version>-<hash>/bin/
# A build goes into a temp dir beside it and is renamed in only when every
# binary linked, so a cut build never counts as cached. kwok's stage
# config (kwok-stages.yaml) lies beside the binaries. The bin dir is
# written to $BERTH_K8S_CACHE/CURRENT (internal/testenv/kubeenv reads it)
# and printed on stdout, the only thing this script prints there.
#   scripts/k8s-tools.sh          build if missing, print the bin dir
#   scripts/k8s-tools.sh --check  print the bin dir if cached, else exit 1
set -euo pipefail
# The whole script is one function, read before it runs: editing this file
# while a build runs cannot change what that build does.
main() {
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=readonly"

cache=${BERTH_K8S_CACHE:-/var/cache/berth/k8s}
kube=tools/k8s/kube
kwok=tools/k8s/kwok
modver() { awk -v m="$2" '$1 == m { print $2; exit }' "$1/go.mod"; }
k8s_version=$(modver "$kube" k8s.io/kubernetes)
etcd_version=$(modver "$kube" go.etcd.io/etcd/server/v3)
kwok_version=$(sed -n 's/^require sigs.k8s.io\/kwok //p' "$kwok/go.mod")
[ -n "$k8s_version" ] && [ -n "$etcd_version" ] && [ -n "$kwok_version" ] || {
	echo "k8s-tools: cannot read the versions from $kube/go.mod and $kwok/go.mod" >&2
	exit 1
}
hash=$(cat "$kube"/go.mod "$kube"/go.sum "$kube"/etcd/main.go "$kwok"/go.mod "$kwok"/go.sum "$0" |
	sha256sum | cut -c1-10)
dest="$cache/$k8s_version-$hash"
bins=(kube-apiserver kubelet kube-scheduler kube-controller-manager kube-proxy etcd kwok)

cached() {
	local b
	for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
	[ -s "$dest/bin/kwok-stages.yaml" ]
}
publish() {
	printf '%s\n' "$dest/bin" >"$cache/CURRENT.tmp.$$"
	mv -f "$cache/CURRENT.tmp.$$" "$cache/CURRENT"
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

# One build at a time per cache (two clones testing at once share it).
exec 9>"$cache/.lock"
flock 9
if cached; then
	publish
	exit 0
fi

tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
log() { echo "k8s-tools: $*" >&2; }
t0=$(date +%s)
step() { # name dir pkg ldflags
	local s
	s=$(date +%s)
	log "building $1 ..."
	(cd "$2" && go build -trimpath -ldflags "$4" -o "$tmp/bin/$1" "$3")
	log "built $1 in $(($(date +%s) - s))s"
}
minor=${k8s_version#v1.}
minor=${minor%%.*}
kv="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
kv+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
kv+=" -X k8s.io/component-base/version.gitTreeState=clean"
step etcd "$kube" ./etcd "-s -w"
step kube-apiserver "$kube" k8s.io/kubernetes/cmd/kube-apiserver "$kv"
step kubelet "$kube" k8s.io/kubernetes/cmd/kubelet "$kv"
step kube-scheduler "$kube" k8s.io/kubernetes/cmd/kube-scheduler "$kv"
step kube-controller-manager "$kube" k8s.io/kubernetes/cmd/kube-controller-manager "$kv"
step kube-proxy "$kube" k8s.io/kubernetes/cmd/kube-proxy "$kv"
step kwok "$kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w"
# kwok runs only with Stage objects saying how simulated nodes and pods
# progress; it ships its "fast" ones as kustomize files in its module.
kwok_dir=$(cd "$kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for f in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
	echo "---"
	cat "$kwok_dir/kustomize/stage/$f.yaml"
done >"$tmp/bin/kwok-stages.yaml"
cat >"$tmp/VERSIONS" <<EOF
kubernetes $k8s_version
etcd $etcd_version
kwok $kwok_version
go $(go env GOVERSION)
built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - t0))s
EOF
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "all built in $(($(date +%s) - t0))s into $dest"
publish
}
main "$@"

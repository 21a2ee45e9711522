#!/usr/bin/env bash
# Builds gVisor for the Kubernetes test cluster's node (kubeenv.Options.GVisor):
# runsc and containerd-shim-runsc-v1 (gvisor.dev/gvisor/runsc and
# gvisor.dev/gvisor/shim, one module version: the one scripts/install-runsc.sh
# pins, so the node's runsc is the local backend's), statically linked, from
# the Go module proxy, the shim with two patches (below: its oom_score_adj,
# and the bootstrap reply containerd 1.6 reads).
# Cached like scripts/k8s-tools.sh, under a key of its own:
#   $BERTH_K8S_CACHE (default /var/cache/berth/k8s)/runsc-<commit>-<hash>/bin/
# built into a temp dir renamed in only when both linked; one build at a time
# (flock). The bin dir is written to $BERTH_K8S_CACHE/CURRENT-RUNSC (kubeenv
# reads it, or $BERTH_K8S_RUNSC_BIN) and printed on stdout, the only thing
# printed there.
#   scripts/k8s-runsc-tools.sh          build if missing, print the bin dir
#   scripts/k8s-runsc-tools.sh --check  print the bin dir if cached, else exit 1
set -euo pipefail
main() {
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0
# gVisor's go branch has no go.sum entries for every dependency (see
# scripts/install-runsc.sh): -mod=mod lets the go command resolve them.
export GOFLAGS="-buildvcs=false -mod=mod"

cache=${BERTH_K8S_CACHE:-/var/cache/berth/k8s}
version=$(sed -n 's/^RUNSC_VERSION=\${RUNSC_VERSION:-\(v[^}]*\)}$/\1/p' scripts/install-runsc.sh)
[ -n "$version" ] || {
	echo "k8s-runsc-tools: cannot read RUNSC_VERSION from scripts/install-runsc.sh" >&2
	exit 1
}
hash=$(printf '%s\n' "$version" | cat - "$0" | sha256sum | cut -c1-10)
dest="$cache/runsc-${version##*-}-$hash"
bins=(runsc containerd-shim-runsc-v1)

cached() {
	local b
	for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
}
publish() {
	printf '%s\n' "$dest/bin" >"$cache/CURRENT-RUNSC.tmp.$$"
	mv -f "$cache/CURRENT-RUNSC.tmp.$$" "$cache/CURRENT-RUNSC"
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
exec 9>"$cache/.lock-runsc"
flock 9
if cached; then
	publish
	exit 0
fi

tmp=$(mktemp -d "$cache/.build-runsc-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
log() { echo "k8s-runsc-tools: $*" >&2; }
t0=$(date +%s)
log "building runsc and containerd-shim-runsc-v1 at gvisor.dev/gvisor@$version (several minutes)"
# go install of a module at a version builds outside any main module: no
# go.mod of berth's is touched. Static (CGO_ENABLED=0): runsc re-executes
# itself after pivoting into an empty root.
GOBIN="$tmp/bin" go install -trimpath \
	-ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$version" \
	"gvisor.dev/gvisor/runsc@$version"
# The shim, from a patched copy of the module. Upstream's shim sets its own
# oom_score_adj to -999 and fails its start when it may not: lowering it
# needs CAP_SYS_RESOURCE, which root on this machine (a container) lacks.
# The copy built here ignores that permission error, as containerd's own
# shims do; nothing else changes. The substitution is checked: an upstream
# change that moves it fails here.
src=$(go mod download -json "gvisor.dev/gvisor@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || {
	log "cannot find gvisor.dev/gvisor@$version in the module cache"
	exit 1
}
cp -r "$src" "$tmp/gvisor"
chmod -R u+w "$tmp/gvisor"
manager="$tmp/gvisor/pkg/shim/v1/manager.go"
old_line='if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {'
new_line='if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil \&\& !os.IsPermission(err) {'
grep -qF "$old_line" "$manager" || {
	log "patch: the shim's SetOOMScore call is not where it was in $manager"
	exit 1
}
sed -i "s/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {/$new_line/" "$manager"
grep -qF '!os.IsPermission(err) {' "$manager" || {
	log "patch: the substitution did not apply"
	exit 1
}
# The second patch. This shim is built on containerd 2's shim library,
# whose "start" prints JSON bootstrap parameters ({"version":2,"address":
# ...}); Debian's containerd 1.6 reads only a plain address and fails
# ("dial unix {"version":2,...: invalid argument"). containerd 1.7 and later
# read either (a reply that is not JSON is a ttrpc address), so the copy
# prints the address alone: the library is replaced by a copy whose start
# writes params.Address.
cd_src=$(cd "$tmp/gvisor" && go list -m -f '{{.Dir}}' github.com/containerd/containerd/v2)
[ -d "$cd_src" ] || {
	log "cannot find github.com/containerd/containerd/v2 (the shim library) in the module cache"
	exit 1
}
mkdir -p "$tmp/containerd"
cp -r "$cd_src/." "$tmp/containerd/"
chmod -R u+w "$tmp/containerd"
shimgo="$tmp/containerd/pkg/shim/shim.go"
grep -qF 'data, err := json.Marshal(&params)' "$shimgo" || {
	log "patch: the shim library's bootstrap print is not where it was in $shimgo"
	exit 1
}
sed -i 's/data, err := json.Marshal(&params)/data, err := []byte(params.Address), error(nil); _ = json.Marshal/' "$shimgo"
grep -qF 'data, err := []byte(params.Address), error(nil)' "$shimgo" || {
	log "patch: the substitution did not apply"
	exit 1
}
(cd "$tmp/gvisor" && go mod edit -replace "github.com/containerd/containerd/v2=$tmp/containerd" &&
	go build -trimpath -ldflags "-s -w" -o "$tmp/bin/containerd-shim-runsc-v1" ./shim)
rm -rf "$tmp/gvisor" "$tmp/containerd"
for b in "${bins[@]}"; do
	if ldd "$tmp/bin/$b" >/dev/null 2>&1; then
		log "$b is dynamically linked; refusing it"
		exit 1
	fi
done
"$tmp/bin/runsc" --version >/dev/null
cat >"$tmp/VERSIONS" <<VERSIONS
gvisor.dev/gvisor $version
go $(go env GOVERSION)
built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - t0))s
VERSIONS
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "built in $(($(date +%s) - t0))s into $dest"
publish
}
main "$@"

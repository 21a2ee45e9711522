#!/usr/bin/env bash
# Builds the CNCF distribution registry (github.com/distribution/distribution,
# cmd/registry) from the Go module proxy, for the tests that pull from and
# push to a real registry (internal/testenv/regtest). The binary is cached
# outside the clone, keyed by its version, so later runs on the same machine
# (and other clones) reuse it:
#   $BERTH_REGISTRY_CACHE (default /var/cache/berth/registry)/<version>/registry
# A build goes into a temp dir beside it and is renamed in only when it
# linked, so a cut build never counts as cached. The binary's path is
# written to $BERTH_REGISTRY_CACHE/CURRENT (regtest reads it) and printed on
# stdout, the only thing this script prints there.
#   scripts/install-registry.sh          build if missing, print the path
#   scripts/install-registry.sh --check  print the path if cached, else exit 1
set -euo pipefail
main() {
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0
export GOFLAGS=-mod=mod

version=${REGISTRY_VERSION:-v3.1.2}
cache=${BERTH_REGISTRY_CACHE:-/var/cache/berth/registry}
dest="$cache/$version"

cached() { [ -x "$dest/registry" ]; }
publish() {
	printf '%s\n' "$dest/registry" >"$cache/CURRENT.tmp.$$"
	mv -f "$cache/CURRENT.tmp.$$" "$cache/CURRENT"
	echo "$dest/registry"
}

if [ "${1:-}" = "--check" ]; then
	cached || exit 1
	echo "$dest/registry"
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
t0=$(date +%s)
echo "install-registry: building github.com/distribution/distribution/v3/cmd/registry@$version (about 2 minutes)" >&2
GOBIN="$tmp" go install -trimpath -ldflags "-s -w" \
	"github.com/distribution/distribution/v3/cmd/registry@$version" >&2
"$tmp/registry" --version >/dev/null
printf 'distribution %s\ngo %s\nbuilt %s in %ss\n' "$version" "$(go env GOVERSION)" \
	"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(($(date +%s) - t0))" >"$tmp/VERSIONS"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "install-registry: built in $(($(date +%s) - t0))s into $dest" >&2
publish
}
main "$@"

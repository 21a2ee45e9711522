#!/usr/bin/env bash
# Builds kube-network-policies (sigs.k8s.io/kube-network-policies, the
# NetworkPolicy enforcer the test cluster runs when a test asks for it:
# kubeenv.Options.NetworkPolicy) from the Go module proxy, with berth's own
# main (tools/k8s/netpol). Cached like scripts/k8s-tools.sh, under a key of
# its own:
#   $BERTH_K8S_CACHE (default /var/cache/berth/k8s)/netpol-<version>-<hash>/bin/kube-network-policies
# and the bin dir written to $BERTH_K8S_CACHE/NETPOL (kubeenv reads it, or
# $BERTH_NETPOL_BIN) and printed on stdout, the only thing printed there.
#   scripts/k8s-netpol-tools.sh          build if missing, print the bin dir
#   scripts/k8s-netpol-tools.sh --check  print the bin dir if cached, else exit 1
#
# The patch. Upstream queues packets with nft's own "queue" expression
# (nft_queue); kernels built without CONFIG_NFT_QUEUE (this machine's)
# refuse that rule, so the table never loads and nothing is enforced. The
# copy built here queues with the xtables NFQUEUE target through nft_compat
# instead (same queue, same bypass flag: CONFIG_NETFILTER_XT_TARGET_NFQUEUE),
# and does not call into its NRI plugin when NRI is off (upstream does, on
# a nil pointer, for a packet whose address is no pod's). Every
# substitution is checked: an upstream change that moves them fails here.
set -euo pipefail
main() {
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=readonly"

cache=${BERTH_K8S_CACHE:-/var/cache/berth/k8s}
src=tools/k8s/netpol
mod=sigs.k8s.io/kube-network-policies
version=$(awk -v m="$mod" '$1 == m { print $2; exit }' "$src/go.mod")
[ -n "$version" ] || { echo "k8s-netpol-tools: no $mod in $src/go.mod" >&2; exit 1; }
hash=$(cat "$src"/go.mod "$src"/go.sum "$src"/main.go "$0" | sha256sum | cut -c1-10)
dest="$cache/netpol-$version-$hash"
bin=kube-network-policies

publish() {
	printf '%s\n' "$dest/bin" >"$cache/NETPOL.tmp.$$"
	mv -f "$cache/NETPOL.tmp.$$" "$cache/NETPOL"
	echo "$dest/bin"
}
if [ "${1:-}" = "--check" ]; then
	[ -x "$dest/bin/$bin" ] || exit 1
	echo "$dest/bin"
	exit 0
fi
mkdir -p "$cache"
if [ -x "$dest/bin/$bin" ]; then
	publish
	exit 0
fi
exec 9>"$cache/.netpol.lock"
flock 9
if [ -x "$dest/bin/$bin" ]; then
	publish
	exit 0
fi

tmp=$(mktemp -d "$cache/.netpol-build-XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
t0=$(date +%s)
log() { echo "k8s-netpol-tools: $*" >&2; }
cp -r "$src" "$tmp/src"
upstream=$(cd "$src" && go mod download -json "$mod@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$upstream" ] || { log "cannot download $mod@$version"; exit 1; }
cp -r "$upstream" "$tmp/src/knp"
chmod -R u+w "$tmp/src/knp"
pkg="$tmp/src/knp/pkg/networkpolicy"
perl -0pi -e 's/queue := &expr\.Queue\{Num: uint16\(c\.config\.QueueID\)\}\n\tif c\.config\.FailOpen \{\n\t\tqueue\.Flag = expr\.QueueFlagBypass\n\t\}/queue := xtQueue(uint16(c.config.QueueID), c.config.FailOpen)/g' "$pkg/controller.go"
perl -0pi -e 's/&expr\.Queue\{Num: uint16\(n\.nfQueueID\), Flag: expr\.QueueFlagBypass\}/xtQueue(uint16(n.nfQueueID), true)/g' "$pkg/dnsagent.go"
perl -0pi -e 's/(\n\t\t\tpodKey := c\.nriPlugin\.GetPodFromIP\(podIP\))/\n\t\t\tif c.nriPlugin == nil {\n\t\t\t\treturn nil\n\t\t\t}$1/' "$pkg/controller.go"
if grep -q 'expr\.Queue{' "$pkg"/*.go || [ "$(grep -c 'xtQueue(' "$pkg/controller.go")" != 2 ] ||
	! grep -q 'if c.nriPlugin == nil' "$pkg/controller.go"; then
	log "the patch no longer applies to $mod@$version"
	exit 1
fi
cat >"$pkg/xtqueue_berth.go" <<'GO'
package networkpolicy

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// xtQueue is "queue num N [bypass]" as the xtables NFQUEUE target (revision
// 3: struct xt_NFQ_info_v3 {u16 queuenum, queues_total, flags}) through
// nft_compat, for kernels without nft_queue. Added by berth's
// scripts/k8s-netpol-tools.sh.
func xtQueue(num uint16, bypass bool) *expr.Target {
	info := make([]byte, 6)
	binary.NativeEndian.PutUint16(info[0:], num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:], 1) // NFQ_FLAG_BYPASS
	}
	u := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &u}
}
GO
(cd "$tmp/src" && go mod edit -replace "$mod=./knp")
mkdir "$tmp/bin"
log "building $bin $version ..."
(cd "$tmp/src" && go build -trimpath -ldflags "-s -w" -o "$tmp/bin/$bin" .)
cat >"$tmp/VERSIONS" <<V
$mod $version (patched: nfqueue through nft_compat, NRI nil check)
go $(go env GOVERSION)
built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - t0))s
V
rm -rf "$tmp/src"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "built in $(($(date +%s) - t0))s into $dest"
publish
}
main "$@"

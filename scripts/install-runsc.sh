#!/bin/sh
# install-runsc.sh: build gVisor's runsc from the Go module proxy and install
# it as /usr/local/bin/runsc (or $RUNSC_DEST). Idempotent: does nothing when
# the installed binary is already the wanted version.
#
# Debian's runsc package (2022-12) is broken on current kernels (it loses or
# truncates container output); do not use it. See docs/gvisor.md.
#
#   RUNSC_VERSION   module version (default: the pinned pseudo-version below)
#   RUNSC_DEST      install path (default /usr/local/bin/runsc)
#   FORCE=1         rebuild even when the wanted version is installed
set -eu

RUNSC_VERSION=${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
RUNSC_DEST=${RUNSC_DEST:-/usr/local/bin/runsc}
STAMP="$RUNSC_DEST.version"

if ! command -v go >/dev/null 2>&1; then
	echo "install-runsc: go is required (Go 1.26 or newer)" >&2
	exit 1
fi

# The pseudo-version's commit hash (last 12 hex digits) is what
# `runsc --version` reports, so the check does not depend on the stamp file
# alone.
want_commit=${RUNSC_VERSION##*-}
# runsc must be statically linked: it re-executes itself (/proc/self/exe)
# after pivoting into an empty root, where a dynamically linked build finds
# no ELF interpreter and every sandbox fails with "error executing umounter:
# fork/exec /proc/self/exe: no such file or directory". A plain
# `go install` on a host with a C compiler builds a dynamic binary (the net
# package's cgo resolver), hence CGO_ENABLED=0 below.
static() { ! ldd "$1" >/dev/null 2>&1; }
if [ -z "${FORCE:-}" ] && [ -x "$RUNSC_DEST" ] && ! static "$RUNSC_DEST"; then
	echo "install-runsc: $RUNSC_DEST is dynamically linked and cannot start sandboxes; rebuilding"
elif [ -z "${FORCE:-}" ] && [ -x "$RUNSC_DEST" ]; then
	have=$(cat "$STAMP" 2>/dev/null || true)
	if [ "$have" = "$RUNSC_VERSION" ] || "$RUNSC_DEST" --version 2>/dev/null | grep -q "$want_commit"; then
		echo "install-runsc: $RUNSC_DEST is already $RUNSC_VERSION"
		exit 0
	fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "install-runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION (about 3 minutes)"
# gVisor's go branch has no go.sum entries for every dependency: -mod=mod
# lets the go command resolve them. CGO is not needed (runsc is pure Go).
# -trimpath as scripts/k8s-runsc-tools.sh builds the same runsc for the
# Kubernetes test node: with the same compile flags its build is the Go
# build cache's, a link of seconds instead of minutes of both cores.
GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$tmp" \
	go install -trimpath -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
	"gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
"$tmp/runsc" --version >/dev/null
if ! static "$tmp/runsc"; then
	echo "install-runsc: the build is dynamically linked; refusing to install it" >&2
	exit 1
fi
install -D -m 0755 "$tmp/runsc" "$RUNSC_DEST.new"
mv -f "$RUNSC_DEST.new" "$RUNSC_DEST"
echo "$RUNSC_VERSION" >"$STAMP"
echo "install-runsc: installed $("$RUNSC_DEST" --version | head -1) at $RUNSC_DEST"

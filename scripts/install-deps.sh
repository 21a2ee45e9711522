#!/usr/bin/env bash
# Installs what berth and its tests need on a Debian 12 host, as root, and
# nothing that is already there: runc (the default runtime), busybox-static
# (a tiny static image the tests import), iproute2, python3, PostgreSQL
# (server and psql: the PostgreSQL store's tests and e2e start a private
# cluster with scripts/pg-test-server.sh), containerd and the CNI plugins
# (the Kubernetes test cluster's node), a Go toolchain new enough to
# build berth (taken from the Go module proxy when the host has none), and
# gVisor's runsc (scripts/install-runsc.sh) and the CNCF distribution
# registry (scripts/install-registry.sh). The tests fail, not skip, when
# any of these is missing. Idempotent: a second run changes nothing.
set -euo pipefail

GO_VERSION=1.26.8

need_apt=()
command -v runc >/dev/null || need_apt+=(runc)
[ -x /bin/busybox ] || need_apt+=(busybox-static)
command -v mkfs.ext4 >/dev/null || need_apt+=(e2fsprogs)
command -v mkfs.xfs >/dev/null || need_apt+=(xfsprogs)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v curl >/dev/null || need_apt+=(curl ca-certificates)
command -v unzip >/dev/null || need_apt+=(unzip)
command -v make >/dev/null || need_apt+=(make)
command -v git >/dev/null || need_apt+=(git)
# The tests drive python3 inside sandboxes (host /usr) and through it the
# host's libseccomp (runc's dependency) as a reference for berth's compiler.
command -v python3 >/dev/null || need_apt+=(python3)
# `python` as well as `python3` in the base template (the host's /usr): E2B
# programs run `python ...` (docs/e2b.md).
[ -e /usr/bin/python ] || need_apt+=(python-is-python3)
# The code-interpreter template runs a Jupyter kernel from the host's /usr
# (internal/interp): ipykernel, jupyter_client, matplotlib, numpy, pandas.
/usr/bin/python3 -c 'import ipykernel, jupyter_client, matplotlib, numpy, pandas' 2>/dev/null ||
	need_apt+=(python3-ipykernel python3-jupyter-client python3-matplotlib python3-numpy python3-pandas)
# PIL: E2B's Image.show() gives a PNG result (internal/interp's kernel setup).
/usr/bin/python3 -c 'import PIL' 2>/dev/null || need_apt+=(python3-pil)
# The code interpreter's R kernel: Debian's R and IRkernel (the kernelspec
# "ir" in /usr/share/jupyter/kernels).
[ -x /usr/bin/R ] && [ -d /usr/lib/R/site-library/IRkernel ] || need_apt+=(r-base-core r-cran-irkernel)
# The Python SDK's suite (test/sdk runs sdk/python/tests with Debian's
# /usr/bin/python3): its one runtime dependency httpx, websockets for
# terminals, pytest with its asyncio plugin, and pip (with setuptools, the
# build backend) for its test of `pip install ./sdk/python`.
/usr/bin/python3 -c 'import httpx, websockets, pytest, pytest_asyncio, setuptools, pip' 2>/dev/null ||
	need_apt+=(python3-httpx python3-pytest python3-websockets python3-pytest-asyncio python3-pip)
# make unit runs go test -race, which needs cgo: a C compiler and libc headers.
command -v gcc >/dev/null || need_apt+=(gcc libc6-dev)
# The MCP e2e test drives `berth mcp` with the MCP TypeScript SDK (test/mcp;
# it supports node >= 18, Debian 12's).
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
# protoc regenerates the E2B door's envd protocol code (scripts/gen-envdpb.sh).
command -v protoc >/dev/null || need_apt+=(protobuf-compiler)
# A real browser for the port-token test (test/e2e/browser_test.go):
# Debian's Chromium, run headless.
command -v chromium >/dev/null || need_apt+=(chromium)
# PostgreSQL: the server binaries (Debian layout, any version) and psql.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && command -v psql >/dev/null || need_apt+=(postgresql)
# The Kubernetes test cluster's node (internal/testenv/kubeenv, make
# test-k8s): Debian's containerd 1.6 and ctr (the CRI runtime kubelet drives,
# on runc) and the CNI plugins (bridge, host-local, loopback) that give pods
# an address on a private bridge. iptables comes with them as a dependency.
command -v containerd >/dev/null && command -v ctr >/dev/null || need_apt+=(containerd)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
	need_apt+=(containernetworking-plugins)
# kube-proxy (the test cluster's Services, Options.ServiceProxy) programs
# the host's tables with iptables-restore (Debian's iptables, nf_tables).
command -v iptables-save >/dev/null && command -v iptables-restore >/dev/null || need_apt+=(iptables)

if [ ${#need_apt[@]} -gt 0 ]; then
	echo "installing: ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

go_ok() {
	command -v go >/dev/null || return 1
	local v
	v=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
	[ "$(printf '%s\n%s\n' "1.26" "$v" | sort -V | head -1)" = "1.26" ]
}
if ! go_ok && [ -x /usr/local/go/bin/go ]; then
	export PATH=/usr/local/go/bin:$PATH
fi
if ! go_ok; then
	echo "installing Go ${GO_VERSION} from the Go module proxy"
	tmp=$(mktemp -d)
	curl -fsSL -o "$tmp/go.zip" \
		"https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip"
	unzip -q "$tmp/go.zip" -d "$tmp"
	rm -rf /usr/local/go
	mv "$tmp/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" /usr/local/go
	chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/* 2>/dev/null || true
	rm -rf "$tmp"
	export PATH=/usr/local/go/bin:$PATH
fi
go version
runc --version | sed -n 1p

# gVisor's runsc (the runsc runtime class): a static build from the Go
# module proxy, 2-3 minutes the first time; idempotent. BERTH_SKIP_RUNSC=1
# skips it (the daemon then offers runc only, and make test fails in the
# runsc tests: only for machines that build, not test).
if [ "${BERTH_SKIP_RUNSC:-0}" = "1" ]; then
	echo "skipping runsc (BERTH_SKIP_RUNSC=1)"
else
	"$(dirname "$0")/install-runsc.sh"
	runsc --version | sed -n 1p
fi

# The CNCF distribution registry the registry tests push to and pull from
# (internal/testenv/regtest): built from the Go module proxy, about 2-5
# minutes the first time, then cached under /var/cache/berth/registry.
"$(dirname "$0")/install-registry.sh" >/dev/null

# The web console's build tools and the e2e test's axe-core, pinned in
# internal/console/web/package-lock.json (make console, make lint).
if [ ! -f "$(dirname "$0")/../internal/console/web/node_modules/.package-lock.json" ] ||
	[ "$(dirname "$0")/../internal/console/web/package-lock.json" -nt "$(dirname "$0")/../internal/console/web/node_modules/.package-lock.json" ]; then
	(cd "$(dirname "$0")/../internal/console/web" && npm ci --no-audit --no-fund)
fi

# The code interpreter's JavaScript and TypeScript kernel: Deno's own
# Jupyter kernel (`deno jupyter`), from npm's deno, whose binary comes in
# its optional dependency @deno/linux-x64-glibc (no download at install).
# Global, so it lands in /usr/bin, the sandboxes' /usr (npm's prefix here).
DENO_VERSION=2.9.6
if [ "$(/usr/bin/deno --version 2>/dev/null | sed -n 's/^deno \([^ ]*\).*/\1/p')" != "$DENO_VERSION" ]; then
	npm install -g --no-audit --no-fund --prefix /usr "deno@$DENO_VERSION"
fi

# The E2B e2e test drives the E2B door with the unmodified e2b SDK, pinned
# in test/e2b/package-lock.json.
if [ ! -f "$(dirname "$0")/../test/e2b/node_modules/e2b/package.json" ] ||
	[ ! -f "$(dirname "$0")/../test/e2b/node_modules/@e2b/code-interpreter/package.json" ]; then
	(cd "$(dirname "$0")/../test/e2b" && npm ci --no-audit --no-fund)
fi

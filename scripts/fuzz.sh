#!/usr/bin/env bash
# Runs every Go fuzz target for the given time each (default 30s). Their seed
# corpora already run as plain tests in `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-30s}
for pkg in $(go list ./...); do
	for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "==> $pkg $f"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done

#!/usr/bin/env bash
# The quick start: starts a berth daemon on the embedded defaults (SQLite in
# /var/lib/berth, the builtin "base" template that needs no download),
# runs a one-shot ephemeral job, then a longer-lived sandbox, and shows that
# nothing is left. The daemon keeps running for you afterwards
# (stop it with: kill "$(cat /run/berth/berth.pid)").
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything missing on a fresh Debian 12 machine (make included), then a build.
./scripts/install-deps.sh
export PATH=/usr/local/go/bin:$PATH
if [ -z "${BERTH:-}" ]; then
	ldflags="-s -w -X main.version=$(git describe --always --dirty 2>/dev/null || echo dev)"
	# berthd is the daemon (and every verb); berth, the CLI, hands it serve.
	CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o bin/berthd ./cmd/berth
	CGO_ENABLED=0 go build -trimpath -tags berthcli -ldflags "$ldflags" -o bin/berth ./cmd/berth
	# The agent every sandbox runs as its PID 1, found beside berth.
	CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o bin/berth-agent ./cmd/berth-agent
fi
BERTH=${BERTH:-$PWD/bin/berth}
SOCK=/run/berth/berth.sock
export BERTH_HOST=unix://$SOCK

if ! "$BERTH" version >/dev/null 2>&1; then
	mkdir -p /run/berth /var/log
	echo "==> starting the daemon (log: /var/log/berth.log)"
	setsid "$BERTH" serve >>/var/log/berth.log 2>&1 < /dev/null &
	echo $! > /run/berth/berth.pid
	for _ in $(seq 100); do "$BERTH" version >/dev/null 2>&1 && break; sleep 0.1; done
fi
"$BERTH" version

echo "==> an ephemeral one-shot job: create, run, stream, destroy"
set +e
"$BERTH" run -- sh -c 'echo "hello from $(hostname): uid $(id -u) inside, kernel $(uname -r)"; exit 3'
echo "    exit code: $? (the command's own)"
set -e

echo "==> a persistent sandbox: its workspace survives scale-to-zero"
id=$("$BERTH" create --name demo-$$ --persistent --persist-root --volume-size 256m --idle-timeout 10m --on-idle stop)
echo "    created $id"
"$BERTH" exec "$id" -- sh -c 'echo "work in progress" > /workspace/notes.txt; mkdir -p /opt && echo tool > /opt/installed'
"$BERTH" stop "$id" >/dev/null && echo "    stopped (no processes, no memory; volume kept)"
"$BERTH" start "$id" >/dev/null && echo "    started again"
"$BERTH" exec "$id" -- cat /workspace/notes.txt /opt/installed
echo "==> fork it: a disposable child sees the parent's files, its writes stay its own"
kid=$("$BERTH" fork "$id")
"$BERTH" exec "$kid" -- sh -c 'cat /workspace/notes.txt; echo child-only > /workspace/notes.txt'
"$BERTH" exec "$id" -- cat /workspace/notes.txt
"$BERTH" rm "$kid" >/dev/null
"$BERTH" ls
"$BERTH" rm "$id"

echo "==> what is left on the host"
"$BERTH" ls --all | tail -n 3
"$BERTH" doctor

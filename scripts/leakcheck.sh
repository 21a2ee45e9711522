#!/usr/bin/env bash
# After the suite: proves the tests left nothing of berth on the host — no
# mounts, loop devices, cgroups, processes or temp dirs of test daemons.
# A thin wrapper: the definition of a leak is internal/testenv's, the one
# every harness (e2e, soak, bench, selftest) checks its own daemons with.
#   scripts/leakcheck.sh [--record F | --before F] [STAMP]
#   temp dirs older than STAMP are not counted; --before F: leaks already in
#   the record F (a --record at the run's start) are reported, not counted
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./test/leakcheck "$@"

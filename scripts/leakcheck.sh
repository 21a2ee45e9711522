#!/usr/bin/env bash
# After the suite: proves the tests left nothing of berth on the host —
# no mounts, runc state, cgroups, processes or temp dirs of test daemons.
# Only looks at names berth's tests use (berth-e2e-*, berth-* cgroups).
set -uo pipefail
fail=0
mounts=$(grep -c -E ' /tmp/berth-(e2e|bench)-' /proc/self/mountinfo)
if [ "$mounts" -gt 0 ]; then echo "leak: $mounts mounts under /tmp/berth-*"; fail=1; fi
# Every test daemon removes its cgroup parent; the default data dir's
# (a daemon the user runs, e.g. after `make demo`) is not the tests'.
default="berth-$(printf '%s' /var/lib/berth | sha256sum | cut -c1-8)"
for h in /sys/fs/cgroup/*/; do
	for d in "$h"berth-*/; do
		[ -d "$d" ] || continue
		[ "$(basename "$d")" = "$default" ] && continue
		echo "leak: cgroup $d"; fail=1
	done
done
dirs=$(find /tmp -maxdepth 1 -name 'berth-e2e-*' -newer "${1:-/proc/1}" 2>/dev/null | grep -v -- '-bin-' | wc -l)
if [ "$dirs" -gt 0 ]; then echo "leak: $dirs test dirs in /tmp"; fail=1; fi
procs=$(ps -eo args= | grep -c -E '^/tmp/berth-(e2e|bench)-[^ ]*/berth (serve|agent)')
if [ "$procs" -gt 0 ]; then echo "leak: $procs berth processes of test daemons"; fail=1; fi
if [ $fail -eq 0 ]; then echo "leak check: nothing left"; fi
exit $fail

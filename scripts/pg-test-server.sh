#!/usr/bin/env bash
# pg-test-server.sh start|stop|url|status — a private, throwaway PostgreSQL
# cluster for berth's tests (internal/store/postgres).
#
#   start   install Debian's postgresql if missing, initdb a fresh cluster and
#           start it; prints the connection URL. A no-op (still printing the
#           URL) when the cluster is already running.
#   stop    stop the cluster (pg_ctl stop) and remove its directory.
#   url     print postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
#           (exits 1 if the cluster is not running).
#   status  exit 0 if the cluster is running, 1 if not.
#
# The cluster lives in $BERTH_PG_TEST_DIR (default /tmp/berth-pg-test): data/
# (owned by the postgres user when run as root), sock/ (its only unix socket
# directory), port, log. It listens on 127.0.0.1 only, on a free port (never
# one already taken, e.g. 5432), trusts every local connection, and runs with
# fsync off: it is for tests only. It never touches a system cluster: no
# pg_ctlcluster, no systemctl, no /etc/postgresql. If installing the package
# creates and starts Debian's "main" cluster, that one is left alone.
set -euo pipefail

BASE=${BERTH_PG_TEST_DIR:-/tmp/berth-pg-test}
DATA=$BASE/data
SOCK=$BASE/sock
MARK=$BASE/.berth-pg-test
PORTFILE=$BASE/port
LOG=$BASE/log

die() { echo "pg-test-server: $*" >&2; exit 1; }
say() { echo "pg-test-server: $*" >&2; }

case "$BASE" in
/*) ;;
*) die "BERTH_PG_TEST_DIR must be absolute: $BASE" ;;
esac
[ "$BASE" != / ] || die "BERTH_PG_TEST_DIR must not be /"

# bindir prints the newest installed server binaries (Debian layout), or
# nothing.
bindir() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] || continue
		echo "$(basename "$(dirname "$d")") $d"
	done | sort -n | tail -1 | cut -d' ' -f2-
}

install_postgres() {
	[ "$(id -u)" = 0 ] || die "PostgreSQL server binaries not found and not root: install postgresql (apt-get install -y postgresql)"
	command -v apt-get >/dev/null || die "PostgreSQL server binaries not found and apt-get is unavailable"
	say "installing postgresql with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q postgresql >&2; then
		apt-get update -q >&2 || die "apt-get update failed"
		apt-get install -y -q postgresql >&2 || die "apt-get install postgresql failed"
	fi
}

# as_owner runs a command as the cluster's owner: postgres when root (the
# server refuses to run as root), else the calling user.
as_owner() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

running() {
	local bin
	[ -f "$MARK" ] && [ -f "$DATA/PG_VERSION" ] && [ -s "$PORTFILE" ] || return 1
	bin=$(bindir)
	[ -n "$bin" ] || return 1
	as_owner "$bin/pg_ctl" status -D "$DATA" >/dev/null 2>&1
}

url() {
	echo "postgres://postgres@127.0.0.1:$(cat "$PORTFILE")/postgres?sslmode=disable"
}

port_taken() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() {
	local p i
	for i in $(seq 1 200); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		port_taken "$p" || { echo "$p"; return 0; }
	done
	die "no free port found"
}

# remove deletes the cluster directory, only if it is one of ours.
remove() {
	if [ -e "$BASE" ]; then
		[ -f "$MARK" ] || die "$BASE exists but was not created by pg-test-server.sh; not removing it"
		rm -rf -- "$BASE"
	fi
}

do_stop() {
	local bin
	if [ -f "$MARK" ] && [ -f "$DATA/postmaster.pid" ]; then
		bin=$(bindir)
		if [ -n "$bin" ] && as_owner "$bin/pg_ctl" status -D "$DATA" >/dev/null 2>&1; then
			as_owner "$bin/pg_ctl" stop -D "$DATA" -m immediate -w -t 30 >&2 ||
				die "pg_ctl stop failed; see $LOG"
		fi
	fi
	remove
}

do_start() {
	local bin owner port try
	if running; then
		url
		return 0
	fi
	bin=$(bindir)
	if [ -z "$bin" ]; then
		install_postgres
		bin=$(bindir)
		[ -n "$bin" ] || die "postgresql installed but no server binaries under /usr/lib/postgresql/*/bin"
	fi
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || die "user postgres does not exist (the postgresql package creates it)"
		owner=postgres
	else
		owner=$(id -un)
	fi

	# A stale cluster (crashed, rebooted) is thrown away, not repaired.
	do_stop
	mkdir -p -- "$BASE"
	touch "$MARK"
	mkdir -p -- "$DATA" "$SOCK"
	chmod 0755 "$BASE"
	chmod 0700 "$DATA"
	chown -R "$owner" "$BASE"

	as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C --no-sync \
		>"$LOG.initdb" 2>&1 || { cat "$LOG.initdb" >&2; die "initdb failed"; }

	for try in 1 2 3 4 5; do
		port=$(free_port)
		cat >"$DATA/postgresql.auto.conf" <<-EOF
			listen_addresses = '127.0.0.1'
			port = $port
			unix_socket_directories = '$SOCK'
			max_connections = 200
			fsync = off
			synchronous_commit = off
			full_page_writes = off
			logging_collector = off
		EOF
		chown "$owner" "$DATA/postgresql.auto.conf"
		# 9>&-: the server must not inherit (and so hold) the flock.
		if as_owner "$bin/pg_ctl" start -D "$DATA" -l "$LOG" -w -t 60 >&2 9>&-; then
			echo "$port" >"$PORTFILE"
			say "started $("$bin/postgres" --version) in $BASE on 127.0.0.1:$port"
			url
			return 0
		fi
		# Most likely someone took the port between the check and the bind.
		port_taken "$port" || { tail -20 "$LOG" >&2 || true; die "pg_ctl start failed; see $LOG"; }
		say "port $port was taken meanwhile; retrying ($try)"
	done
	die "could not start PostgreSQL; see $LOG"
}

# Serialize concurrent invocations on the same directory.
lock() {
	mkdir -p -- "$(dirname "$BASE")"
	exec 9>"$BASE.lock"
	flock 9
}

cmd=${1:-}
case "$cmd" in
start)
	lock
	do_start
	;;
stop)
	lock
	do_stop
	rm -f -- "$BASE.lock"
	;;
url)
	running || die "not running (run: $0 start)"
	url
	;;
status)
	running
	;;
*)
	echo "usage: $0 start|stop|url|status" >&2
	exit 2
	;;
esac

// Command berth is the daemon (berth serve) and the CLI that drives it,
// built twice: whole as berthd, and with -tags berthcli as berth, the CLI,
// which leaves out serve, bench and selftest (daemon_cli.go hands those to
// the berthd beside it) and with them the engine, the Kubernetes client and
// the storage drivers, so that a `berth exec` does not pay their start-up.
// The agent that runs inside each sandbox is its own small binary,
// cmd/berth-agent, built beside them. This file only wires; each verb
// lives in its own file.
//
// Every table goes through newTable (output.go), which escapes control
// characters, DEL, C1 and invalid UTF-8 before the tabwriter: file names,
// argv and event messages are the sandbox's choice and must not drive the
// reader's terminal. complete.go is shell completion (berth completion):
// sandbox ids and names (also as ID: for berth fs), template names, read
// from the daemon under a short timeout; failures complete nothing. berth ls -q
// --filter filters the API's list in the CLI; an unknown verb's "did you
// mean" suggestions stay on the one error line.
//
// context.go and config.go are berth context: saved daemons in
// $XDG_CONFIG_HOME/berth/config.json, and globals.resolve, the one place
// that decides host, key and TLS (flags, BERTH_*, context, default).
//
// fs.go is berth fs (ls, stat, mkdir, rm, mv on ID:/path); lease.go is
// berth lease and berth port-token over the lease and port-token routes.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(execute(context.Background(), newRootCmd(), os.Args[1:], os.Stderr))
}

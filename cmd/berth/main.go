// Command berth is the daemon (berth serve) and the CLI that drives it. The
// agent that runs inside each sandbox is its own small binary,
// cmd/berth-agent, built beside it. This file only wires; each verb lives
// in its own file.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(execute(context.Background(), newRootCmd(), os.Args[1:], os.Stderr))
}

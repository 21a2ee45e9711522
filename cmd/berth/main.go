// Command berth is berth's single binary: the daemon (berth serve), the CLI
// that drives it, and the agent that runs inside each sandbox (berth agent).
// This file only wires; each verb lives in its own file.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(execute(context.Background(), newRootCmd(), os.Args[1:], os.Stderr))
}

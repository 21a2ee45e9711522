// Command berth-agent is the agent that runs inside every sandbox as its
// PID 1 (internal/agent/agentd), built as its own small static binary.
//
// It is apart from cmd/berth so that what is mounted into each sandbox
// holds the agent's code and nothing else: no CLI, no daemon, no
// Kubernetes client, no database drivers. Code in the sandbox can read
// the binary it runs beside (it is mounted read-only), so it should carry
// no more than it needs, and every sandbox maps its pages: a 6 MB agent
// costs far less page cache and start-up than the 88 MB product binary.
// The daemon finds it beside its own executable (berth serve --agent to
// name another) and versions it with itself: both are built by make build.
package main

import (
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/agent/agentd"
)

// version is set at build time (-X main.version=...), as berth's is.
var version = "dev"

func main() {
	// Mounted at /.berth/bin/sudo in a sandbox with sudo: the sudo program.
	if filepath.Base(os.Args[0]) == "sudo" {
		os.Exit(agentd.SudoMain(os.Args[1:]))
	}
	args := os.Args[1:]
	// The command lines of sandboxes made before the agent had a binary of
	// its own say "berth agent ...": the verb is accepted and dropped.
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	// The set-up helpers the runsc class runs inside a sandbox.
	if len(args) > 0 && args[0] == agentd.LimitTasksVerb {
		os.Exit(agentd.LimitTasksMain(args[1:]))
	}
	if len(args) > 0 && args[0] == agentd.SudoHelperVerb {
		os.Exit(agentd.SudoHelperMain(args[1:]))
	}
	if len(args) > 0 && args[0] == agentd.SetHostnameVerb {
		os.Exit(agentd.SetHostnameMain(args[1:]))
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		os.Stdout.WriteString("berth-agent " + version + "\n")
		os.Exit(0)
	}
	os.Exit(agentd.Main(args))
}

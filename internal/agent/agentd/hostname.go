package agentd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The host name of a running gVisor sandbox (a warm-pool claim gives the
// claimant's name to a member made under another). gVisor keeps the
// sandbox's UTS namespace inside its Sentry, where the host's nsenter does
// not reach, so the runtime runs this helper in the sandbox through runsc
// exec with CAP_SYS_ADMIN alone: it sets the name and exits. It is run
// only on pool members being claimed, in which nothing but the agent has
// run yet (internal/runtime/runsc.go, SetHostname).

// SetHostnameVerb is the verb of the agent binary (berth-agent) that runs the
// helper: `berth-agent agent-set-hostname NAME`.
const SetHostnameVerb = "agent-set-hostname"

// SetHostnameMain is the helper's entry point; it returns the exit code.
func SetHostnameMain(args []string) int {
	if len(args) != 1 || !validHostname(args[0]) {
		fmt.Fprintf(os.Stderr, "usage: berth %s NAME (1..64 bytes of letters, digits, '-' and '.')\n", SetHostnameVerb)
		return 2
	}
	if err := unix.Sethostname([]byte(args[0])); err != nil {
		fmt.Fprintf(os.Stderr, "berth %s: %v\n", SetHostnameVerb, err)
		return 1
	}
	return 0
}

// validHostname reports whether s is a host name the kernel takes and a
// resolver would: 1..64 bytes of ASCII letters, digits, '-' and '.'.
func validHostname(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

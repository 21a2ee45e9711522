// Package catalogue is the selftest's attack catalogue: every escape and
// abuse attempt `berth selftest` makes, one file per category (kernel,
// proc, caps, cve, agent, resources, net with cross, files, api; egress
// with the network namespaces it makes). Each attack is data (id,
// category, what it does, what a secure system does, runtime classes)
// plus a Run that performs it against an attack.Env and judges the
// observation. Expected outcomes are what a secure system does, not what
// berth happens to do today.
package catalogue

import (
	"context"
	"net/http"
	"os"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// All returns every attack, in report order: category by category
// (attack.Categories), as each category's file lists them.
func All() []*attack.Attack {
	var all []*attack.Attack
	for _, part := range [][]*attack.Attack{kernelAttacks(), procAttacks(), capsAttacks(), cveAttacks(), agentAttacks(), sudoAttacks(),
		resourceAttacks(), netAttacks(), crossAttacks(), filesAttacks(), apiAttacks(), rightsAttacks(), consoleAttacks(), storageAttacks(), e2bAttacks()} {
		all = append(all, part...)
	}
	return all
}

type (
	ctxT     = context.Context
	sandboxT = api.Sandbox
)

func containsStr(s, sub string) bool { return sub != "" && strings.Contains(s, sub) }

// hostKernelVersion is this host's kernel release (uname -r).
func hostKernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// endedAlone judges an attack that ended its own sandbox: contained when
// nothing beyond it was affected — the daemon answers and a new sandbox of
// the same class runs a command.
func endedAlone(ctx context.Context, e *attack.Env, format string, args ...any) attack.Outcome {
	sb, err := e.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		return attack.Escaped("the sandbox ended and the daemon cannot create another: %v", err)
	}
	if ok, why := e.Alive(ctx, sb.ID); !ok {
		return attack.Escaped("the sandbox ended and another one does not answer: %s", why)
	}
	return attack.Contained(format, args...)
}

// denied reports whether an HTTP status is an authorization denial.
func denied(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// Package failpoint lets crash-recovery tests kill the daemon at exact
// points between side effects. A point fires only when its name is listed
// in the BERTH_FAILPOINTS environment variable the daemon was started
// with; otherwise Hit costs a map lookup.
package failpoint

import (
	"os"
	"strings"
	"syscall"
)

var points = parse(os.Getenv("BERTH_FAILPOINTS"))

func parse(s string) map[string]bool {
	m := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			m[p] = true
		}
	}
	return m
}

// Hit kills this process with SIGKILL, as a crash would, if the point
// name is enabled.
func Hit(name string) {
	if len(points) == 0 || !points[name] {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}

// Enabled reports whether a point is listed; for test-only switches that
// alter behaviour rather than crash.
func Enabled(name string) bool { return points[name] }

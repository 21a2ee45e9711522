package runtime

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// inheritRlimits reports whether runc cannot set a container's rlimits from
// outside a user namespace host root does not own (that needs
// CAP_SYS_RESOURCE on the host). When it cannot, it sets the daemon's own
// open-files limit to the sandboxes' (nofileLimit, soft; the hard limit
// cannot be raised) once, explicitly, so that the runtime processes the
// daemon starts, and the containers they start, inherit it (Go otherwise
// hands children the limit the daemon was started with).
var inheritRlimits = sync.OnceValue(func() bool {
	if hasCap(unix.CAP_SYS_RESOURCE) {
		return false
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		rl.Cur = min(nofileLimit(), rl.Max)
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
	}
	return true
})

// hasCap reports whether the process has capability c in effect.
func hasCap(c int) bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && bits&(1<<uint(c)) != 0
		}
	}
	return false
}

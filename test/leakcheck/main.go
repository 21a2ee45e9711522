// Command leakcheck is scripts/leakcheck.sh: run after a whole suite, it
// proves the tests left nothing of berth on the host (testenv.Sweep: the
// same definition of a leak every harness checks its own daemons with).
// It only looks at what berth's harnesses make: their temp dirs
// (berth-e2e-*, berth-bench-*, berth-selftest-*, berth-node-*, berth-k8s-*:
// a Kubernetes test cluster, whose links, nft table and CNI cache files it
// also looks for), the mounts, loop
// devices and processes of those dirs, and berth-* cgroup parents other
// than the default data dir's (a daemon the user runs, e.g. after make
// demo).
//
//	go run ./test/leakcheck [STAMP]
//
// Temp dirs older than the file STAMP are not counted (default: /proc/1,
// i.e. since boot).
package main

import (
	"fmt"
	"os"

	"github.com/berth-sh/berth/internal/daemon"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/testenv"
)

func main() {
	stamp := "/proc/1"
	if len(os.Args) > 1 {
		stamp = os.Args[1]
	}
	o := testenv.SweepOptions{Keep: []string{"/" + local.InstanceName(daemon.DefaultDataDir)}}
	if st, err := os.Stat(stamp); err == nil {
		o.Since = st.ModTime()
	}
	leaks := testenv.Sweep(o)
	for _, l := range leaks {
		fmt.Println("leak:", l)
	}
	if len(leaks) > 0 {
		os.Exit(1)
	}
	fmt.Println("leak check: nothing left")
}

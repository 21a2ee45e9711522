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
//	go run ./test/leakcheck [--record FILE | --before FILE] [STAMP]
//
// Temp dirs older than the file STAMP are not counted (default: /proc/1,
// i.e. since boot).
//
// A suite proves that it cleaned up after itself, not that the machine was
// clean when it started: a CI machine can carry what an earlier, failed run
// left, and some of that the kernel will not give back (a loop device whose
// filesystem is still pinned by a detached mount has no holder user space
// can name or release). So `make test` records what is there before it
// runs (--record FILE) and checks against that record at the end
// (--before FILE): a leak that was there before is printed, loudly, and not
// counted; anything new fails the check. Every harness dir has a fresh
// random name, so a leak of this run can never match an old record.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/berth-sh/berth/internal/daemon"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/testenv"
)

func main() {
	record := flag.String("record", "", "write what is there now to `FILE` and exit 0 (the baseline of a run)")
	before := flag.String("before", "", "leaks listed in `FILE` (a --record of this run's start) are reported, not counted")
	flag.Parse()
	stamp := "/proc/1"
	if flag.NArg() > 0 {
		stamp = flag.Arg(0)
	}
	o := testenv.SweepOptions{Keep: []string{"/" + local.InstanceName(daemon.DefaultDataDir)}}
	if st, err := os.Stat(stamp); err == nil {
		o.Since = st.ModTime()
	}
	leaks := testenv.Sweep(o)
	if *record != "" {
		if err := writeRecord(*record, leaks); err != nil {
			fmt.Fprintln(os.Stderr, "leakcheck:", err)
			os.Exit(2)
		}
		for _, l := range leaks {
			fmt.Println("leak check: already there before this run:", l)
		}
		return
	}
	old := map[string]bool{}
	if *before != "" {
		var err error
		if old, err = readRecord(*before); err != nil {
			fmt.Fprintln(os.Stderr, "leakcheck:", err)
			os.Exit(2)
		}
	}
	n := 0
	for _, l := range leaks {
		if old[l.String()] {
			fmt.Println("leak check: NOT CLEANED, but there before this run (not counted):", l)
			continue
		}
		fmt.Println("leak:", l)
		n++
	}
	if n > 0 {
		os.Exit(1)
	}
	fmt.Println("leak check: nothing left")
}

func writeRecord(path string, leaks []testenv.Leak) error {
	var b strings.Builder
	for _, l := range leaks {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// readRecord reads a --record file. A missing file is an error: a check
// told to compare against a baseline that was never written must not pass
// by default.
func readRecord(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			out[line] = true
		}
	}
	return out, sc.Err()
}

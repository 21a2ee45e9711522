//go:build !berthcli

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file the daemon writes a CPU profile of its whole
// life to (read with `go tool pprof`): how the create path's time was
// found (docs/testing.md, "Profiling the daemon"). It is the environment's,
// not a flag's, so `berth bench` and the test harness pass it on to the
// daemons they start without knowing of it.
const cpuProfileEnv = "BERTH_CPU_PROFILE"

// A file that exists already is left alone: the profile goes to
// FILE.<pid> instead (a bench starts more than one daemon).
func startCPUProfile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(fmt.Sprintf("%s.%d", path, os.Getpid()), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

package network

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// hostLockPath is the file whose exclusive flock serialises the daemons of
// one host while each chooses its subnets and addresses its bridge. /run
// is the host's (a sandbox never sees it) and root's alone to write.
var hostLockPath = "/run/berth-network.lock"

// lockHostNetwork takes the host's network lock and returns its release.
// The kernel drops the lock if the daemon dies holding it.
func lockHostNetwork() (func(), error) {
	f, err := os.OpenFile(hostLockPath, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("network: host lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("network: host lock %s: %w", hostLockPath, err)
	}
	return func() { f.Close() }, nil
}

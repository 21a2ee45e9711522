package egress

// A network namespace made before the sandbox starts, for runtime classes
// whose network stack takes over the namespace's interfaces when the
// sandbox is created (gVisor's netstack with runsc --network=sandbox): the
// daemon makes an empty namespace, pins it with a bind mount at a path in
// the sandbox's root-only control directory, wires it to the bridge
// exactly as it wires a runc sandbox's own namespace after start
// (AttachAt), and hands the path to the runtime. The host end of the veth,
// the sandbox's nft chain, DNS pins and flow log are the same objects in
// both cases, so the policy does not depend on the class.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/sandbox"
)

// MakeNetns makes a new, empty network namespace pinned at path, replacing
// one a failed or interrupted earlier attempt left there (whose interfaces
// a runtime may have taken over).
func MakeNetns(path string) error {
	if err := RemoveNetns(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("netns pin %s: %w", path, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread that unshares never returns to the pool: it exits
		// with this goroutine (locked, not unlocked), its namespace with
		// it but for the pin.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("pinning the netns at %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// RemoveNetns unpins and removes a namespace MakeNetns made. The
// namespace itself ends when nothing holds it (the sandbox's processes
// gone). A missing pin is not an error.
func RemoveNetns(path string) error {
	for i := 0; i < 16; i++ { // stacked pins of interrupted attempts
		err := unix.Unmount(path, unix.MNT_DETACH)
		if err == nil {
			continue
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		return fmt.Errorf("unpinning netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// AttachAt connects the network namespace pinned at netnsPath as egress
// sandbox sb before its runtime starts it (see MakeNetns).
func (e *Net) AttachAt(ctx context.Context, sb *sandbox.Sandbox, netnsPath string) error {
	return e.attach(ctx, sb, netnsPath)
}

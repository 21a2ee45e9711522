package network

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// dumpTries bounds the reads of one netlink dump the kernel keeps
// interrupting.
const dumpTries = 10

// Dump runs a netlink dump (a link, address or route listing) again while
// the kernel reports it interrupted (NLM_F_DUMP_INTR, netlink's
// ErrDumpInterrupted: the table changed while it was read, as it does
// whenever another daemon, a sandbox or the host adds or removes a link
// meanwhile), so the caller gets a consistent listing or an error, never
// a partial listing read as whole nor a spurious failure.
func Dump[T any](list func() (T, error)) (T, error) {
	var (
		out T
		err error
	)
	for range dumpTries {
		if out, err = list(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}

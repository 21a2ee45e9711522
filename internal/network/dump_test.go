package network

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestDumpRetriesInterrupted: an interrupted dump is read again until it
// is whole; one interrupted every time is an error after dumpTries reads;
// any other error is returned at once.
func TestDumpRetriesInterrupted(t *testing.T) {
	n := 0
	got, err := Dump(func() ([]string, error) {
		n++
		if n < 3 {
			return []string{"partial"}, netlink.ErrDumpInterrupted
		}
		return []string{"a", "b"}, nil
	})
	if err != nil || len(got) != 2 || n != 3 {
		t.Fatalf("Dump = %v, %v after %d reads; want the whole listing after 3", got, err, n)
	}
	n = 0
	if _, err := Dump(func() ([]string, error) { n++; return nil, netlink.ErrDumpInterrupted }); !errors.Is(err, netlink.ErrDumpInterrupted) || n != dumpTries {
		t.Fatalf("always interrupted: %v after %d reads", err, n)
	}
	n = 0
	boom := errors.New("boom")
	if _, err := Dump(func() ([]string, error) { n++; return nil, boom }); err != boom || n != 1 {
		t.Fatalf("other error: %v after %d reads", err, n)
	}
}

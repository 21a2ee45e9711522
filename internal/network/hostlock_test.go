package network

import (
	"path/filepath"
	"sync"
	"testing"
)

// TestHostLockSerialises: while one holder has the host's network lock, a
// second waits; it gets the lock once the first lets go.
func TestHostLockSerialises(t *testing.T) {
	old := hostLockPath
	hostLockPath = filepath.Join(t.TempDir(), "network.lock")
	t.Cleanup(func() { hostLockPath = old })

	unlock, err := lockHostNetwork()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	released := false
	got := make(chan bool)
	go func() {
		u, err := lockHostNetwork()
		if err != nil {
			t.Error(err)
			got <- false
			return
		}
		mu.Lock()
		got <- released
		mu.Unlock()
		u()
	}()
	// The second holder cannot have the lock yet: it is ours.
	select {
	case <-got:
		t.Fatal("a second holder took the lock while the first held it")
	default:
	}
	mu.Lock()
	released = true
	unlock()
	mu.Unlock()
	if !<-got {
		t.Fatal("the second holder got the lock before the first released it")
	}
}

package idmap

import (
	"os"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func TestProbe(t *testing.T) {
	needRoot(t)
	m := Mapping{Inside: 100000000, Outside: 100065536 * 2, Size: 65536}
	if err := Probe(t.TempDir(), m, m.Outside); err != nil {
		t.Fatal(err)
	}
}

func TestNewUsernsOwnerAndCost(t *testing.T) {
	needRoot(t)
	const base = 100131072
	start := time.Now()
	const n = 20
	for range n {
		ns, err := NewUserns([]Mapping{{0, base, 65536}}, base)
		if err != nil {
			t.Fatal(err)
		}
		if o, err := Owner(ns); err != nil || o != base {
			t.Fatalf("owner %d %v", o, err)
		}
		ns.Close()
	}
	t.Logf("NewUserns: %s each", time.Since(start)/n)
}

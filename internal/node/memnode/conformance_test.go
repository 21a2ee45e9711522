package memnode_test

import (
	"testing"

	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/node/nodetest"
)

// TestConformance runs the node backend conformance suite on the double,
// with the pod-like class beside the runc- and runsc-like ones, so the
// engine's unit tests stand on a backend that keeps the seam's contract.
func TestConformance(t *testing.T) {
	nodetest.Run(t, func(t *testing.T) nodetest.Harness {
		return nodetest.Harness{
			Backend: memnode.New(t, memnode.WithClasses(memnode.FakeRunc, memnode.FakeRunsc, memnode.FakePod)),
			Layers:  []string{"memnode-base"},
			Model:   true,
		}
	})
}

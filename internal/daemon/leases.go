package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/store"
)

// leases are the daemon's reconcile leases (package leader) and the
// goroutines keeping them. The store-wide lease is contended only on a
// shared store (PostgreSQL); the node lease only when the node is shared
// by several replicas (a Kubernetes backend: every replica names the same
// node), never for the local backend, whose node name is its data dir's.
type leases struct {
	node, store leader.Lease
	// self is this replica's holder id; presence its presence lease, kept
	// where the node is shared (nil elsewhere), by which the node lease's
	// holder tells whether this replica's creates in flight are orphans.
	self     string
	presence leader.Lease
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// replicaID names this process among replicas: the host name (a pod's
// name on Kubernetes) and a random boot id, so a restarted replica is a
// new holder and never inherits a fence it did not earn.
func replicaID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "berth"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "/" + hex.EncodeToString(b)
}

// openLeases makes the leases of a daemon on st for node and starts
// keeping the contended ones; close releases them (a graceful hand-over).
func openLeases(st store.Store, node string, sharedStore, sharedNode bool, ttl time.Duration, log *slog.Logger) *leases {
	self := replicaID()
	ctx, cancel := context.WithCancel(context.Background())
	l := &leases{cancel: cancel, self: self}
	keep := func(name string, shared bool) leader.Lease {
		if !shared {
			return leader.Always(name, self)
		}
		k := leader.New(st, name, self, leader.WithTTL(ttl), leader.WithLogger(log.With("lease", name)))
		l.wg.Add(1)
		go func() { defer l.wg.Done(); k.Run(ctx) }()
		return k
	}
	l.node = keep(leader.NodeLeaseName(node), sharedNode)
	l.store = keep(leader.StoreLeaseName, sharedStore)
	if sharedNode {
		// No one else takes it: it is held while this replica lives and
		// reaches the store, released at a graceful stop.
		l.presence = keep(leader.ReplicaLeaseName(self), true)
	}
	log.Info("reconcile leases", "replica", self, "node_lease_shared", sharedNode, "store_lease_shared", sharedStore, "ttl", ttl)
	return l
}

// held is the berth_reconcile_leader source.
func (l *leases) held() map[string]bool {
	_, n := l.node.Held()
	_, s := l.store.Held()
	return map[string]bool{"node": n, "store": s}
}

func (l *leases) close() {
	l.cancel()
	l.wg.Wait()
}

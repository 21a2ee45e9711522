// Package reconcile is the engine's reconciler: recovery at start,
// policy enforcement, teardown retries and doctor.
//
// Recover runs at start: it adopts running sandboxes whose container and
// agent answer, finishes interrupted creates (re-running the idempotent
// provision steps) and deletes, destroys one-shot sandboxes (their client
// is gone) and sandboxes that died while the daemon was down, finishes a
// hibernate or wake a crash cut short, destroys build sandboxes whose
// build died with the daemon, and sweeps orphans (the backend's Sweep:
// containers, cgroups, mounts, dirs, id slots no record accounts for).
// Then a loop sleeps until the next policy deadline (sandbox.Next, pure
// functions of stored timestamps; at most the reconcile interval), acts on
// it, retries pending teardowns, notices sandboxes whose processes are
// gone, refills warm pools, expires snapshots and idempotency keys, and,
// every fifth tick, purges tombstones older than --retention
// (docs/lifecycle.md). Doctor lists what the sweep would fix; doctor --fix
// fixes it.
//
// On a node several replicas share, only the holder of the node's
// reconcile lease acts (internal/leader), each action fenced; start-up
// recovery is not run (other replicas' creates in flight are not
// interrupted), and instead the holder finishes or fails the transitions
// of replicas whose presence lease lapsed (orphans) and sweeps the shared
// node when it takes the lease and every 5 minutes (sweepShared). See
// docs/kubernetes.md, "Replicas".
package reconcile

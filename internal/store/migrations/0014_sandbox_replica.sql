-- 0014_sandbox_replica: which replica made a sandbox's last transition
-- (its holder id, e.g. "pod-name/boot-id"). Replicas sharing a node keep a
-- presence lease each (reconcile_leases, name "replica:<id>"); the node
-- lease's holder finishes a create or start left in flight by a replica
-- whose presence lapsed (package leader, reconcile.orphans). '' for
-- records written before, or by a daemon that shares nothing.
ALTER TABLE sandboxes ADD COLUMN replica TEXT NOT NULL DEFAULT '';

-- 0007_retention_paging: indexes for the retention sweep (tombstones by
-- deletion time, webhook delivery records by age) and for paging snapshots
-- in their stable order (creation time, then id). Sandboxes, volumes and
-- API keys already have their (created_at, id) indexes.

CREATE INDEX sandboxes_deleted ON sandboxes (state, deleted_at);
CREATE INDEX volumes_deleted ON volumes (state, deleted_at);
CREATE INDEX webhook_deliveries_at ON webhook_deliveries (at);
CREATE INDEX snapshots_created ON snapshots (created_at, id);

-- 0003_snapshots: named, crash-consistent snapshots of sandboxes'
-- filesystems, and the layer-cache of declarative template builds.

CREATE TABLE snapshots (
    id          TEXT   NOT NULL PRIMARY KEY,
    name        TEXT   NOT NULL,
    tenant      TEXT   NOT NULL,
    sandbox_id  TEXT   NOT NULL,
    template    TEXT   NOT NULL,
    layers      TEXT   NOT NULL,          -- []string as JSON
    spec        TEXT   NOT NULL,          -- sandbox.Spec as JSON, at the snapshot
    parent      TEXT   NOT NULL DEFAULT '',
    size_bytes  BIGINT NOT NULL DEFAULT 0,
    created_at  BIGINT NOT NULL DEFAULT 0,
    expires_at  BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX snapshots_name ON snapshots (tenant, name);
CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);

-- Declarative template builds: the layer a step produced, keyed by the
-- hash of everything the step depends on.
CREATE TABLE build_cache (
    key         TEXT   NOT NULL PRIMARY KEY,
    layer       TEXT   NOT NULL,
    created_at  BIGINT NOT NULL DEFAULT 0
);

-- Warm pools: how many ready sandboxes each template keeps.
CREATE TABLE pools (
    template    TEXT   NOT NULL PRIMARY KEY,
    min_ready   BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL DEFAULT 0
);

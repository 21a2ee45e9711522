-- 0002_persistent: what persistent sandboxes need — activity and pause/stop
-- timestamps, the state a quarantined sandbox returns to, the node that
-- owns each sandbox, volumes, and the webhook delivery log with its cursor.

ALTER TABLE sandboxes ADD COLUMN last_activity_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN paused_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN stopped_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN prev_state TEXT NOT NULL DEFAULT '';
-- The daemon (node) whose host runs the sandbox: only it acts on it.
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_node ON sandboxes (node, state);

CREATE TABLE volumes (
    id          TEXT    NOT NULL PRIMARY KEY,
    name        TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    size_bytes  BIGINT  NOT NULL,
    inodes      BIGINT  NOT NULL,
    sandbox_id  TEXT    NOT NULL DEFAULT '',
    keep        BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  BIGINT  NOT NULL DEFAULT 0,
    updated_at  BIGINT  NOT NULL DEFAULT 0,
    deleted_at  BIGINT  NOT NULL DEFAULT 0,
    generation  BIGINT  NOT NULL
);
CREATE UNIQUE INDEX volumes_live_name ON volumes (tenant, name) WHERE state <> 'deleted';
CREATE INDEX volumes_created ON volumes (created_at, id);

CREATE TABLE webhook_deliveries (
    id          {{identity}},
    event_id    BIGINT NOT NULL,
    url         TEXT   NOT NULL,
    attempt     BIGINT NOT NULL,
    status      BIGINT NOT NULL DEFAULT 0,   -- HTTP status, 0 if none
    error       TEXT   NOT NULL DEFAULT '',
    at          BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id, id);

-- One row per webhook URL: the id of the last event delivered (or given up on).
CREATE TABLE webhook_cursors (
    url         TEXT   NOT NULL PRIMARY KEY,
    event_id    BIGINT NOT NULL
);

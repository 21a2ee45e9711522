-- 0001_init: sandboxes (with tombstones), their events, templates and API keys.
--
-- Portable SQL shared by every SQL backend: TEXT and BIGINT columns only,
-- timestamps as BIGINT unix microseconds in UTC (0 = unset), JSON as TEXT,
-- booleans as BOOLEAN. {{identity}} is the one dialect macro: an
-- auto-incrementing 64-bit primary key (see sqlstore.Dialect).

CREATE TABLE sandboxes (
    id          TEXT   NOT NULL PRIMARY KEY,
    tenant      TEXT   NOT NULL,
    name        TEXT   NOT NULL DEFAULT '',
    state       TEXT   NOT NULL,
    spec        TEXT   NOT NULL,            -- sandbox.Spec as JSON
    created_at  BIGINT NOT NULL DEFAULT 0,
    updated_at  BIGINT NOT NULL DEFAULT 0,
    started_at  BIGINT NOT NULL DEFAULT 0,
    deleted_at  BIGINT NOT NULL DEFAULT 0,
    cause       TEXT   NOT NULL DEFAULT '',
    reason      TEXT   NOT NULL DEFAULT '',
    error       TEXT   NOT NULL DEFAULT '',
    generation  BIGINT NOT NULL
);

-- A live sandbox's name is unique within its tenant; tombstones and unnamed
-- sandboxes are exempt, so a name can be reused once its holder is deleted.
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (tenant, name)
    WHERE state <> 'deleted' AND name <> '';
CREATE INDEX sandboxes_created ON sandboxes (created_at, id);
CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_at, id);

CREATE TABLE events (
    id          {{identity}},
    sandbox_id  TEXT   NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    at          BIGINT NOT NULL DEFAULT 0,
    type        TEXT   NOT NULL,
    from_state  TEXT   NOT NULL DEFAULT '',
    to_state    TEXT   NOT NULL DEFAULT '',
    actor       TEXT   NOT NULL DEFAULT '',
    cause       TEXT   NOT NULL DEFAULT '',
    reason      TEXT   NOT NULL DEFAULT '',
    outcome     TEXT   NOT NULL DEFAULT '',
    message     TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX events_sandbox ON events (sandbox_id, id);

CREATE TABLE templates (
    name        TEXT    NOT NULL PRIMARY KEY,
    layers      TEXT    NOT NULL,           -- []string as JSON
    config      TEXT    NOT NULL,           -- store.TemplateConfig as JSON
    builtin     BOOLEAN NOT NULL DEFAULT FALSE,
    source      TEXT    NOT NULL DEFAULT '',
    size        BIGINT  NOT NULL DEFAULT 0,
    created_at  BIGINT  NOT NULL DEFAULT 0
);

CREATE TABLE api_keys (
    id          TEXT   NOT NULL PRIMARY KEY,
    name        TEXT   NOT NULL DEFAULT '',
    tenant      TEXT   NOT NULL,
    hash        TEXT   NOT NULL UNIQUE,     -- lowercase hex of the secret's SHA-256
    scopes      TEXT   NOT NULL,            -- []string as JSON
    created_at  BIGINT NOT NULL DEFAULT 0,
    revoked_at  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at, id);

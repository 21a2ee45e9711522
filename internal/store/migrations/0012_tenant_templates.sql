-- 0012_tenant_templates: templates, build-cache entries and warm pools get
-- an owning tenant. Tenant '' is the host's shared catalogue (builtin and
-- host-imported templates), which every tenant reads; a tenant's own
-- template of the same name shadows it for that tenant only. Names are
-- unique per tenant, so each table's primary key gains the tenant column:
-- SQLite cannot alter a primary key, so every table is rebuilt (create the
-- new table, copy, drop, rename), which is portable to PostgreSQL as well.
-- Existing rows are the shared catalogue's (tenant '').

CREATE TABLE templates_t (
    tenant      TEXT    NOT NULL DEFAULT '',
    name        TEXT    NOT NULL,
    layers      TEXT    NOT NULL,           -- []string as JSON
    config      TEXT    NOT NULL,           -- store.TemplateConfig as JSON
    builtin     BOOLEAN NOT NULL DEFAULT FALSE,
    source      TEXT    NOT NULL DEFAULT '',
    size        BIGINT  NOT NULL DEFAULT 0,
    created_at  BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
);
INSERT INTO templates_t (tenant, name, layers, config, builtin, source, size, created_at)
    SELECT '', name, layers, config, builtin, source, size, created_at FROM templates;
DROP TABLE templates;
ALTER TABLE templates_t RENAME TO templates;

-- Build-cache entries are per tenant: a hit across tenants would hand one
-- tenant a layer made from another tenant's files.
CREATE TABLE build_cache_t (
    tenant      TEXT   NOT NULL DEFAULT '',
    key         TEXT   NOT NULL,
    layer       TEXT   NOT NULL,
    created_at  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, key)
);
INSERT INTO build_cache_t (tenant, key, layer, created_at)
    SELECT '', key, layer, created_at FROM build_cache;
DROP TABLE build_cache;
ALTER TABLE build_cache_t RENAME TO build_cache;

-- Warm pools are per (tenant, template).
CREATE TABLE pools_t (
    tenant      TEXT   NOT NULL DEFAULT '',
    template    TEXT   NOT NULL,
    min_ready   BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, template)
);
INSERT INTO pools_t (tenant, template, min_ready, updated_at)
    SELECT '', template, min_ready, updated_at FROM pools;
DROP TABLE pools;
ALTER TABLE pools_t RENAME TO pools;

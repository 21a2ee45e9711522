-- 0010_quotas: per-tenant quotas. Keyed by the tenant's name (no foreign
-- key: tenants may be known only by their API keys). 0 in any column
-- means unlimited. max_cpus is in millicores; memory and storage in bytes;
-- create_rate is creates per minute with create_burst at once; key_rate
-- is API requests per second per key of the tenant with key_burst.
CREATE TABLE tenant_quotas (
    tenant        TEXT   NOT NULL PRIMARY KEY,
    max_sandboxes BIGINT NOT NULL DEFAULT 0,
    max_cpus      BIGINT NOT NULL DEFAULT 0,
    max_memory    BIGINT NOT NULL DEFAULT 0,
    max_storage   BIGINT NOT NULL DEFAULT 0,
    create_rate   BIGINT NOT NULL DEFAULT 0,
    create_burst  BIGINT NOT NULL DEFAULT 0,
    key_rate      BIGINT NOT NULL DEFAULT 0,
    key_burst     BIGINT NOT NULL DEFAULT 0,
    updated_at    BIGINT NOT NULL DEFAULT 0
);

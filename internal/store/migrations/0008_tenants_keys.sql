-- 0008_tenants_keys: tenants, what an API key is (role, expiry, its
-- printable prefix, who made it) and minted lease tokens.
--
-- A tenant owns every object whose tenant column names it. The host's own
-- objects (the unix socket's, the bootstrap key's) have tenant ''.
CREATE TABLE tenants (
    name        TEXT   NOT NULL PRIMARY KEY,
    created_at  BIGINT NOT NULL DEFAULT 0
);

-- Keys made before roles hold their explicit scopes: role '' means "the
-- scopes column is the whole grant".
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
CREATE INDEX api_keys_prefix ON api_keys (prefix);

-- A lease is a credential for one sandbox: the token carries the lease id
-- under the daemon's HMAC; this row carries what it may do, until when, and
-- whether it still may. Rows are revoked (never reused) when their sandbox
-- stops, is quarantined or deleted, or their minting key is revoked.
CREATE TABLE leases (
    id          TEXT   NOT NULL PRIMARY KEY,
    sandbox_id  TEXT   NOT NULL,
    tenant      TEXT   NOT NULL,
    key_id      TEXT   NOT NULL DEFAULT '',   -- the minting key; '' for the host socket
    scopes      TEXT   NOT NULL,              -- []string as JSON
    created_at  BIGINT NOT NULL DEFAULT 0,
    expires_at  BIGINT NOT NULL DEFAULT 0,    -- 0: lives with its sandbox
    revoked_at  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX leases_sandbox ON leases (sandbox_id);
CREATE INDEX leases_key ON leases (key_id);

-- 0011_secrets: per-tenant secrets, sealed (see internal/secrets): the
-- value's AES-256-GCM ciphertext and nonce under a data key of its own, the
-- data key wrapped by the master key named by key_id. Binary columns are
-- standard base64 in TEXT. No column ever holds a value in clear.

CREATE TABLE secrets (
    tenant      TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    ciphertext  TEXT   NOT NULL,
    nonce       TEXT   NOT NULL,
    wrapped_key TEXT   NOT NULL,
    key_id      TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE INDEX secrets_key_id ON secrets (key_id);

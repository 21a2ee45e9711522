-- 0015_port_tokens: port tokens become records, as leases are. A port
-- token carries its id under the daemon's HMAC; this row says which port
-- of which sandbox it opens, who minted it, until when, and whether it
-- still may. Rows are revoked (never reused) on request, with their
-- minting key, and with their tenant.
CREATE TABLE port_tokens (
    id          TEXT   NOT NULL PRIMARY KEY,
    sandbox_id  TEXT   NOT NULL,
    tenant      TEXT   NOT NULL,
    port        BIGINT NOT NULL,
    key_id      TEXT   NOT NULL DEFAULT '',   -- the minting key; '' for the host socket
    created_by  TEXT   NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL DEFAULT 0,
    expires_at  BIGINT NOT NULL,
    revoked_at  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX port_tokens_sandbox ON port_tokens (sandbox_id);
CREATE INDEX port_tokens_key ON port_tokens (key_id);

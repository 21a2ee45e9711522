-- 0009_audit: the tamper-evident audit log. Per tenant, a chain of records
-- numbered by seq without gaps; each record's hash is an HMAC-SHA256 (under
-- the audit key in the data dir, which the database does not hold) over its
-- immutable fields and the previous record's hash. Rows are only ever
-- inserted: an action's completion is its own "outcome" record whose ref is
-- the seq of its "begin". audit_heads keeps the last seq and hash of each
-- chain, and is the row concurrent appenders serialise on (the UPDATE that
-- takes the next seq locks it until commit, on PostgreSQL too). Not touched
-- by the retention sweep.

CREATE TABLE audit_log (
    id          {{identity}},
    tenant      TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    kind        TEXT   NOT NULL,
    ref         BIGINT NOT NULL DEFAULT 0,
    at          BIGINT NOT NULL,
    actor       TEXT   NOT NULL DEFAULT '',
    action      TEXT   NOT NULL DEFAULT '',
    target      TEXT   NOT NULL DEFAULT '',
    request_id  TEXT   NOT NULL DEFAULT '',
    source      TEXT   NOT NULL DEFAULT '',
    result      TEXT   NOT NULL DEFAULT '',
    prev_hash   TEXT   NOT NULL DEFAULT '',
    hash        TEXT   NOT NULL
);
CREATE UNIQUE INDEX audit_log_chain ON audit_log (tenant, seq);
CREATE INDEX audit_log_ref ON audit_log (tenant, ref);
CREATE INDEX audit_log_at ON audit_log (at);

CREATE TABLE audit_heads (
    tenant TEXT   PRIMARY KEY,
    seq    BIGINT NOT NULL DEFAULT 0,
    hash   TEXT   NOT NULL DEFAULT ''
);

-- 0006_idempotency: Idempotency-Key records of create, fork, snapshot and
-- volume create requests. A row is written before the request acts (state
-- pending, with the ids the objects it makes will get), so a retry after a
-- daemon crash finds what the first attempt made; the answer is stored when
-- it is known (state done). Keys are per caller (scope) and route, and
-- expire 24 hours after the first attempt.

CREATE TABLE idempotency_keys (
    scope        TEXT   NOT NULL,
    route        TEXT   NOT NULL,
    idem_key     TEXT   NOT NULL,
    request_hash TEXT   NOT NULL,
    ids          TEXT   NOT NULL DEFAULT '[]',   -- []string as JSON
    owner        TEXT   NOT NULL DEFAULT '',     -- the attempt acting on it
    state        TEXT   NOT NULL DEFAULT 'pending',
    status       BIGINT NOT NULL DEFAULT 0,
    content_type TEXT   NOT NULL DEFAULT '',
    body         TEXT   NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL DEFAULT 0,
    expires_at   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, route, idem_key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

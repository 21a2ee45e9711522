-- 0004_flows: the network flow log of each sandbox (every allowed and
-- denied connection attempt and DNS query), bounded per sandbox and kept
-- as long as the sandbox's records are.

CREATE TABLE flows (
    id          {{identity}},
    sandbox_id  TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    at          BIGINT NOT NULL DEFAULT 0,
    kind        TEXT   NOT NULL,
    proto       TEXT   NOT NULL DEFAULT '',
    src         TEXT   NOT NULL DEFAULT '',
    dst         TEXT   NOT NULL DEFAULT '',
    name        TEXT   NOT NULL DEFAULT '',
    decision    TEXT   NOT NULL,
    rule        TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX flows_sandbox ON flows (sandbox_id, id);

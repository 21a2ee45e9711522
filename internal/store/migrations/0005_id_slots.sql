-- 0005_id_slots: the host uid/gid range of each sandbox. Slot N is the
-- N'th block of ids above the stored range (see manager/ids.go); a slot is
-- held by at most one sandbox and by a sandbox at most once, from its
-- create until its delete, across daemon restarts.

CREATE TABLE id_slots (
    slot         BIGINT NOT NULL PRIMARY KEY,
    sandbox_id   TEXT   NOT NULL UNIQUE,
    node         TEXT   NOT NULL DEFAULT '',
    allocated_at BIGINT NOT NULL DEFAULT 0
);

-- 0013_reconcile_leases: which replica runs a kind of background work
-- (package leader). One row per lease name: its holder, the fencing token
-- (epoch: incremented whenever the holder changes) and its expiry in unix
-- milliseconds of the database's clock, never a replica's, so clock skew
-- between replicas cannot make two of them think they hold it.
CREATE TABLE reconcile_leases (
    name       TEXT   NOT NULL PRIMARY KEY,
    holder     TEXT   NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);

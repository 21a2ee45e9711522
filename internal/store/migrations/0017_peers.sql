-- 0017_peers: where each daemon sharing this store takes requests
-- forwarded by the others (its mutual-TLS peer listener), by node name.
-- A daemon writes its own row at start; a row is only an address: the
-- channel itself is authenticated by the peers' certificates.
CREATE TABLE peers (
    node        TEXT   NOT NULL PRIMARY KEY,
    addr        TEXT   NOT NULL,
    updated_at  BIGINT NOT NULL DEFAULT 0
);

-- 0023: the registry of a cluster's nodes (as SQLite's 0023): each stead
-- daemon registers itself with its internal address and capacity and
-- refreshes its heartbeat; an operator cordons or drains it (state).

CREATE TABLE nodes (
    name            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    address         TEXT COLLATE "C" NOT NULL,
    cpus            DOUBLE PRECISION NOT NULL,
    memory_bytes    BIGINT NOT NULL,
    pool_free_bytes BIGINT NOT NULL,
    version         TEXT COLLATE "C" NOT NULL,
    state           TEXT COLLATE "C" NOT NULL CHECK (state IN ('active', 'cordoned', 'draining')),
    started_at      TEXT COLLATE "C" NOT NULL,
    heartbeat_at    TEXT COLLATE "C" NOT NULL,
    created_at      TEXT COLLATE "C" NOT NULL
);

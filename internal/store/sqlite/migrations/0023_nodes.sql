-- 0023: the registry of a cluster's nodes: each stead daemon registers
-- itself with its internal address and capacity and refreshes its heartbeat;
-- an operator cordons or drains it (state).

CREATE TABLE nodes (
    name            TEXT NOT NULL PRIMARY KEY,
    address         TEXT NOT NULL,
    cpus            REAL NOT NULL,
    memory_bytes    INTEGER NOT NULL,
    pool_free_bytes INTEGER NOT NULL,
    version         TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('active', 'cordoned', 'draining')),
    started_at      TEXT NOT NULL,
    heartbeat_at    TEXT NOT NULL,
    created_at      TEXT NOT NULL
) STRICT;

-- 0007: structured agent state per sandbox: tasks with a state machine, an
-- append-only observation log, and key-value entries. Plain SQL only (no
-- engine functions, no rowids), so a PostgreSQL schema can mirror this one
-- (there with COLLATE "C" on kv_key, so prefix ranges compare bytes).
-- Purging a sandbox purges all three.

CREATE TABLE tasks (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    id         TEXT NOT NULL,
    state      TEXT NOT NULL,
    payload    BLOB NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, id)
) STRICT;

CREATE INDEX tasks_created ON tasks (sandbox_id, created_at, id);
CREATE INDEX tasks_state ON tasks (sandbox_id, state, created_at, id);

-- seq numbers a sandbox's observations 1, 2, 3 ...; an append takes
-- MAX(seq) + 1 inside its write transaction.
CREATE TABLE observations (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    kind       TEXT NOT NULL,
    principal  TEXT NOT NULL,
    payload    BLOB NOT NULL,
    PRIMARY KEY (sandbox_id, seq)
) STRICT;

CREATE INDEX observations_kind ON observations (sandbox_id, kind, seq);

CREATE TABLE kv_entries (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    kv_key     TEXT NOT NULL,
    value      BLOB NOT NULL,
    version    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, kv_key)
) STRICT;

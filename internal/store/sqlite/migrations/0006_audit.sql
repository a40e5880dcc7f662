-- 0006: the audit trail. An append-only, hash-chained log of every
-- state-changing action, with signed checkpoints of its head. It lives
-- outside every sandbox and references nothing (no foreign keys): purging a
-- sandbox, volume, key or tenant leaves its entries in place. Hashes and
-- signatures are lowercase hex, times the store's fixed-width UTC text, so
-- the same schema works on PostgreSQL.
CREATE TABLE audit_entries (
    seq       INTEGER NOT NULL PRIMARY KEY,
    time      TEXT NOT NULL,
    actor     TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    action    TEXT NOT NULL,
    target    TEXT NOT NULL,
    outcome   TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
);

CREATE INDEX audit_entries_time ON audit_entries (time);

CREATE TABLE audit_checkpoints (
    seq       INTEGER NOT NULL PRIMARY KEY,
    hash      TEXT NOT NULL,
    start_seq INTEGER NOT NULL,
    time      TEXT NOT NULL,
    key_id    TEXT NOT NULL,
    signature TEXT NOT NULL
);

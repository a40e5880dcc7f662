-- 0026: the sandboxes' owner leases (store.OwnershipStore): the node that
-- may act on a sandbox, the epoch that fences its writes, and when its
-- lease lapses. A released or lapsed lease keeps its row, so the epoch
-- never goes back. No foreign key: a lease may be taken before the
-- sandbox's record is written, and it outlives a purge.

CREATE TABLE sandbox_owners (
    sandbox_id  TEXT NOT NULL PRIMARY KEY,
    node        TEXT NOT NULL,
    epoch       INTEGER NOT NULL CHECK (epoch > 0),
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
) STRICT;

CREATE INDEX sandbox_owners_node ON sandbox_owners (node, sandbox_id);

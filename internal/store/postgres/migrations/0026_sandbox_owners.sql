-- 0026: the sandboxes' owner leases (as SQLite's 0026): the node that may
-- act on a sandbox, the epoch that fences its writes, and when its lease
-- lapses. A released or lapsed lease keeps its row, so the epoch never goes
-- back. No foreign key: a lease may be taken before the sandbox's record
-- is written, and it outlives a purge.

CREATE TABLE sandbox_owners (
    sandbox_id  TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    node        TEXT COLLATE "C" NOT NULL,
    epoch       BIGINT NOT NULL CHECK (epoch > 0),
    acquired_at TEXT COLLATE "C" NOT NULL,
    expires_at  TEXT COLLATE "C" NOT NULL
);

CREATE INDEX sandbox_owners_node ON sandbox_owners (node, sandbox_id);

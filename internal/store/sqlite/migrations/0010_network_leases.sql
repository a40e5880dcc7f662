-- 0010: each sandbox's network address, leased once and kept across
-- stop/start, daemon restarts, rollback and hydrate; released at purge.
CREATE TABLE network_leases (
	sandbox_id TEXT NOT NULL,
	family     INTEGER NOT NULL, -- 4 or 6
	address    TEXT NOT NULL UNIQUE,
	created_at TEXT NOT NULL,
	PRIMARY KEY (sandbox_id, family)
);

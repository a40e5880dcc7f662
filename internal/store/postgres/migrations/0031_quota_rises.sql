-- 0031: quota rises admitted and not yet stored (as SQLite's 0031), for
-- quota admission across the nodes of a cluster.
CREATE TABLE quota_rises (
	id TEXT COLLATE "C" PRIMARY KEY,
	tenant_id TEXT COLLATE "C" NOT NULL,
	node TEXT COLLATE "C" NOT NULL,
	running BIGINT NOT NULL,
	cpus DOUBLE PRECISION NOT NULL,
	memory_bytes BIGINT NOT NULL,
	disk_bytes BIGINT NOT NULL,
	volumes BIGINT NOT NULL,
	snapshots BIGINT NOT NULL,
	expires_at TEXT COLLATE "C" NOT NULL
);
CREATE INDEX quota_rises_tenant ON quota_rises (tenant_id, expires_at);

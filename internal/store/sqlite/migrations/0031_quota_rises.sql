-- 0031: quota rises admitted and not yet stored (store.QuotaRise), so that
-- quota admission holds across the nodes of a cluster: an admission reads
-- the usage and these rises under the tenant's admission lock, and adds its
-- own before the lock goes. A rise its node never deleted (the node died)
-- stops counting at expires_at.
CREATE TABLE quota_rises (
	id TEXT PRIMARY KEY,
	tenant_id TEXT NOT NULL,
	node TEXT NOT NULL,
	running INTEGER NOT NULL,
	cpus REAL NOT NULL,
	memory_bytes INTEGER NOT NULL,
	disk_bytes INTEGER NOT NULL,
	volumes INTEGER NOT NULL,
	snapshots INTEGER NOT NULL,
	expires_at TEXT NOT NULL
);
CREATE INDEX quota_rises_tenant ON quota_rises (tenant_id, expires_at);

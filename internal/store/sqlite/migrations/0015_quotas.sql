-- 0015: tenants' quotas. One row per tenant that has ever had its quotas
-- set; a NULL column is no limit. A tenant's row goes with the tenant (the
-- cascade runs inside DeleteTenant's transaction).
CREATE TABLE tenant_quotas (
    tenant_id         TEXT NOT NULL PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    running_sandboxes INTEGER,
    cpus              REAL,
    memory_bytes      INTEGER,
    disk_bytes        INTEGER,
    volumes           INTEGER,
    repository_bytes  INTEGER,
    snapshots         INTEGER,
    updated_at        TEXT NOT NULL
) STRICT;

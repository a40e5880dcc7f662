-- 0004: persistent volumes. A volume outlives every sandbox, so nothing
-- references sandboxes here.
CREATE TABLE volumes (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    state      TEXT NOT NULL,
    created_at TEXT NOT NULL,
    deleted_at TEXT,
    purge_at   TEXT,
    UNIQUE (tenant_id, name)
) STRICT;

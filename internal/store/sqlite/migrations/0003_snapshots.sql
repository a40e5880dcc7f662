-- 0003: local snapshot records. A snapshot outlives its sandbox, so
-- sandbox_id is not a foreign key.
CREATE TABLE snapshots (
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    id           TEXT NOT NULL PRIMARY KEY,
    sandbox_id   TEXT NOT NULL,
    sandbox_name TEXT NOT NULL,
    parent_id    TEXT NOT NULL,
    label        TEXT NOT NULL,
    description  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    frozen_ns    INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    template_id  TEXT NOT NULL,
    spec         BLOB
) STRICT;

CREATE INDEX snapshots_tenant ON snapshots (tenant_id, sandbox_id, created_at);

-- 0012: tenants' secrets. The value is sealed by the daemon (AEAD under a
-- key kept beside the data, never in the database): this table holds no
-- plaintext. A tenant's secrets go with the tenant.
CREATE TABLE secrets (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
) STRICT;

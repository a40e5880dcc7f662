-- 0018: tenants' retention policies and the warnings given before
-- automatic deletions. A NULL duration is unset (the daemon's default);
-- durations are nanoseconds. A warning is kept once per subject, action
-- and due time, so a deletion can prove it was warned. Both go with the
-- tenant (DeleteTenant deletes them in its transaction; the foreign keys
-- cascade as well).
CREATE TABLE retention_policies (
    tenant_id             TEXT NOT NULL PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    archive_stopped_after INTEGER CHECK (archive_stopped_after >= 0),
    delete_archived_after INTEGER CHECK (delete_archived_after >= 0),
    purge_deleted_after   INTEGER CHECK (purge_deleted_after >= 0),
    warn_before           INTEGER CHECK (warn_before >= 0),
    updated_at            TEXT NOT NULL
) STRICT;

CREATE TABLE retention_warnings (
    tenant_id    TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    subject_kind TEXT NOT NULL,
    subject_id   TEXT NOT NULL,
    action       TEXT NOT NULL,
    due_at       TEXT NOT NULL,
    warned_at    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, subject_kind, subject_id, action, due_at)
) STRICT;

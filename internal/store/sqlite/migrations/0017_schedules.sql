-- 0017: cron schedules of sandboxes (start, stop, restart, snapshot, push).
-- A schedule goes with its sandbox's purge and with its tenant (foreign
-- keys with ON DELETE CASCADE). next_run_at is NULL while disabled; the
-- scheduler's query (enabled, next_run_at <= now) reads the partial index.
CREATE TABLE schedules (
    id          TEXT NOT NULL PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    sandbox_id  TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    cron        TEXT NOT NULL,
    tz          TEXT NOT NULL,
    action      TEXT NOT NULL,
    enabled     INTEGER NOT NULL,
    next_run_at TEXT,
    last_run_at TEXT,
    last_result TEXT NOT NULL DEFAULT '',
    last_error  TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
) STRICT;

CREATE INDEX schedules_tenant_created ON schedules (tenant_id, created_at, id);
CREATE INDEX schedules_sandbox ON schedules (sandbox_id);
CREATE INDEX schedules_due ON schedules (next_run_at, id) WHERE enabled = 1;

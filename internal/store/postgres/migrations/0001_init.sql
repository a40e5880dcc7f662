-- The schema of stead's metadata store on PostgreSQL: the end state of the
-- SQLite migrations 0001..0021 (internal/store/sqlite/migrations) in one step,
-- with the same tables, columns, keys and indexes. Types map INTEGER -> BIGINT,
-- REAL -> DOUBLE PRECISION, BLOB -> BYTEA, TEXT -> TEXT in the C collation (so
-- comparisons and ORDER BY are bytewise, as in SQLite). Timestamps stay
-- fixed-width RFC 3339 text with nanoseconds. Later SQLite migrations get a
-- PostgreSQL migration of the same number.

CREATE TABLE tenants (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    state TEXT COLLATE "C" NOT NULL DEFAULT 'active',
    suspended_at TEXT COLLATE "C"
);

-- The default tenant always exists: every resource belongs to it until
-- multi-tenancy lands, and the foreign keys below require an existing tenant.
INSERT INTO tenants (id, name, created_at)
VALUES ('default', 'default', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '000Z');

CREATE TABLE api_keys (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    name       TEXT COLLATE "C" NOT NULL,
    hash       BYTEA NOT NULL UNIQUE,
    admin      BIGINT NOT NULL DEFAULT 0,
    created_at TEXT COLLATE "C" NOT NULL,
    role TEXT COLLATE "C" NOT NULL DEFAULT 'tenant-admin',
    scope TEXT COLLATE "C" NOT NULL DEFAULT '',
    expires_at TEXT COLLATE "C",
    rotated_to TEXT COLLATE "C" NOT NULL DEFAULT ''
);

CREATE INDEX api_keys_tenant_created ON api_keys (tenant_id, created_at, id);

CREATE TABLE templates (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    id         TEXT COLLATE "C" NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL,
    source     TEXT COLLATE "C" NOT NULL,
    digest     TEXT COLLATE "C" NOT NULL DEFAULT '',
    config     BYTEA,
    size_bytes BIGINT NOT NULL DEFAULT 0,
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX templates_tenant_created ON templates (tenant_id, created_at, id);

CREATE TABLE sandboxes (
    id          TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id   TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    name        TEXT COLLATE "C" NOT NULL,
    template_id TEXT COLLATE "C" NOT NULL,
    state       TEXT COLLATE "C" NOT NULL,
    spec        BYTEA,
    stop_reason TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL,
    started_at  TEXT COLLATE "C",
    stopped_at  TEXT COLLATE "C",
    deleted_at  TEXT COLLATE "C",
    purge_at    TEXT COLLATE "C",
    version     BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant_id, created_at, id);

CREATE INDEX sandboxes_created ON sandboxes (created_at, id);

CREATE INDEX sandboxes_state ON sandboxes (state);

CREATE TABLE checkpoint_docs (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    agent      TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    latest     BIGINT NOT NULL,
    keep       BIGINT NOT NULL,
    schema     BYTEA,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    write_access TEXT COLLATE "C" NOT NULL DEFAULT 'any',
    write_keys TEXT COLLATE "C" NOT NULL DEFAULT '',
    read_access TEXT COLLATE "C" NOT NULL DEFAULT 'any',
    read_keys TEXT COLLATE "C" NOT NULL DEFAULT '',
    mutability TEXT COLLATE "C" NOT NULL DEFAULT 'mutable',
    PRIMARY KEY (sandbox_id, agent, name)
);

CREATE INDEX checkpoint_docs_tenant ON checkpoint_docs (tenant_id, sandbox_id);

CREATE TABLE checkpoint_versions (
    sandbox_id TEXT COLLATE "C" NOT NULL,
    agent      TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    version    BIGINT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    principal  TEXT COLLATE "C" NOT NULL,
    run_id     TEXT COLLATE "C" NOT NULL,
    note       TEXT COLLATE "C" NOT NULL,
    body       BYTEA NOT NULL,
    principal_kind TEXT COLLATE "C" NOT NULL DEFAULT '',
    PRIMARY KEY (sandbox_id, agent, name, version),
    FOREIGN KEY (sandbox_id, agent, name)
        REFERENCES checkpoint_docs (sandbox_id, agent, name) ON DELETE CASCADE
);

CREATE TABLE snapshots (
    tenant_id    TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    id           TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    sandbox_id   TEXT COLLATE "C" NOT NULL,
    sandbox_name TEXT COLLATE "C" NOT NULL,
    parent_id    TEXT COLLATE "C" NOT NULL,
    label        TEXT COLLATE "C" NOT NULL,
    description  TEXT COLLATE "C" NOT NULL,
    kind         TEXT COLLATE "C" NOT NULL,
    frozen_ns    BIGINT NOT NULL,
    created_at   TEXT COLLATE "C" NOT NULL,
    template_id  TEXT COLLATE "C" NOT NULL,
    spec         BYTEA
);

CREATE INDEX snapshots_tenant ON snapshots (tenant_id, sandbox_id, created_at);

CREATE TABLE volumes (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL,
    size_bytes BIGINT NOT NULL,
    state      TEXT COLLATE "C" NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    deleted_at TEXT COLLATE "C",
    purge_at   TEXT COLLATE "C",
    origin TEXT COLLATE "C" NOT NULL DEFAULT '',
    UNIQUE (tenant_id, name)
);

CREATE TABLE session_threads (
    id             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id      TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    sandbox_id     TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    name           TEXT COLLATE "C" NOT NULL,
    keep_last      BIGINT NOT NULL,
    keep_within_ns BIGINT NOT NULL,
    created_at     TEXT COLLATE "C" NOT NULL,
    UNIQUE (sandbox_id, name)
);

CREATE INDEX session_threads_sandbox ON session_threads (sandbox_id, created_at, id);

CREATE TABLE session_runs (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL,
    sandbox_id TEXT COLLATE "C" NOT NULL,
    thread_id  TEXT COLLATE "C" NOT NULL REFERENCES session_threads (id) ON DELETE CASCADE,
    status     TEXT COLLATE "C" NOT NULL,
    last_seq   BIGINT NOT NULL,
    started_at TEXT COLLATE "C" NOT NULL,
    ended_at   TEXT COLLATE "C"
);

CREATE INDEX session_runs_thread ON session_runs (thread_id, started_at, id);

CREATE TABLE session_events (
    run_id        TEXT COLLATE "C" NOT NULL REFERENCES session_runs (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    type          TEXT COLLATE "C" NOT NULL,
    model_session TEXT COLLATE "C" NOT NULL,
    idem_key      TEXT COLLATE "C",
    intent_seq    BIGINT NOT NULL,
    created_at    TEXT COLLATE "C" NOT NULL,
    payload       BYTEA NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE UNIQUE INDEX session_events_idem ON session_events (run_id, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX session_events_intent ON session_events (run_id, intent_seq) WHERE intent_seq > 0;
CREATE INDEX session_events_type ON session_events (run_id, type, seq);

CREATE TABLE session_model_sessions (
    run_id     TEXT COLLATE "C" NOT NULL REFERENCES session_runs (id) ON DELETE CASCADE,
    id         TEXT COLLATE "C" NOT NULL,
    first_seq  BIGINT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, id)
);

CREATE TABLE audit_entries (
    seq       BIGINT NOT NULL PRIMARY KEY,
    time      TEXT COLLATE "C" NOT NULL,
    actor     TEXT COLLATE "C" NOT NULL,
    tenant_id TEXT COLLATE "C" NOT NULL,
    action    TEXT COLLATE "C" NOT NULL,
    target    TEXT COLLATE "C" NOT NULL,
    outcome   TEXT COLLATE "C" NOT NULL,
    prev_hash TEXT COLLATE "C" NOT NULL,
    hash      TEXT COLLATE "C" NOT NULL
);

CREATE INDEX audit_entries_time ON audit_entries (time);

CREATE TABLE audit_checkpoints (
    seq       BIGINT NOT NULL PRIMARY KEY,
    hash      TEXT COLLATE "C" NOT NULL,
    start_seq BIGINT NOT NULL,
    time      TEXT COLLATE "C" NOT NULL,
    key_id    TEXT COLLATE "C" NOT NULL,
    signature TEXT COLLATE "C" NOT NULL
);

CREATE TABLE tasks (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    id         TEXT COLLATE "C" NOT NULL,
    state      TEXT COLLATE "C" NOT NULL,
    payload    BYTEA NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (sandbox_id, id)
);

CREATE INDEX tasks_created ON tasks (sandbox_id, created_at, id);

CREATE INDEX tasks_state ON tasks (sandbox_id, state, created_at, id);

CREATE TABLE observations (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL,
    principal  TEXT COLLATE "C" NOT NULL,
    payload    BYTEA NOT NULL,
    PRIMARY KEY (sandbox_id, seq)
);

CREATE INDEX observations_kind ON observations (sandbox_id, kind, seq);

CREATE TABLE kv_entries (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    kv_key     TEXT COLLATE "C" NOT NULL,
    value      BYTEA NOT NULL,
    version    BIGINT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (sandbox_id, kv_key)
);

CREATE TABLE network_leases (
    sandbox_id TEXT COLLATE "C" NOT NULL,
    family     BIGINT NOT NULL, -- 4 or 6
    address    TEXT COLLATE "C" NOT NULL UNIQUE,
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (sandbox_id, family)
);

CREATE TABLE secrets (
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT COLLATE "C" NOT NULL,
    sealed     BYTEA NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE meter_intervals (
    id            BIGINT NOT NULL PRIMARY KEY,
    tenant_id     TEXT COLLATE "C" NOT NULL,
    sandbox_id    TEXT COLLATE "C" NOT NULL,
    instance_type TEXT COLLATE "C" NOT NULL,
    cpus          DOUBLE PRECISION NOT NULL,
    memory_bytes  BIGINT NOT NULL,
    start_at      TEXT COLLATE "C" NOT NULL,
    checkpoint_at TEXT COLLATE "C" NOT NULL,
    open          BIGINT NOT NULL
);

CREATE UNIQUE INDEX meter_intervals_one_open ON meter_intervals (sandbox_id) WHERE open = 1;
CREATE INDEX meter_intervals_tenant ON meter_intervals (tenant_id, checkpoint_at);

CREATE TABLE meter_storage (
    tenant_id    TEXT COLLATE "C" NOT NULL,
    subject      TEXT COLLATE "C" NOT NULL,
    kind         TEXT COLLATE "C" NOT NULL,
    day          TEXT COLLATE "C" NOT NULL,
    byte_seconds DOUBLE PRECISION NOT NULL,
    bytes        BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, day, kind, subject)
);

CREATE TABLE daemon_events (
    id         BIGINT NOT NULL PRIMARY KEY,
    time       TEXT COLLATE "C" NOT NULL,
    type       TEXT COLLATE "C" NOT NULL,
    tenant_id  TEXT COLLATE "C" NOT NULL,
    sandbox_id TEXT COLLATE "C" NOT NULL DEFAULT '',
    state      TEXT COLLATE "C" NOT NULL DEFAULT '',
    reason     TEXT COLLATE "C" NOT NULL DEFAULT '',
    data       TEXT COLLATE "C" NOT NULL DEFAULT '' -- JSON object of strings, or ''
);

CREATE INDEX daemon_events_tenant ON daemon_events (tenant_id, id);

CREATE INDEX daemon_events_time ON daemon_events (time);

CREATE TABLE webhooks (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url        TEXT COLLATE "C" NOT NULL,
    types      TEXT COLLATE "C" NOT NULL DEFAULT '', -- JSON array of type prefixes, or ''
    secret     TEXT COLLATE "C" NOT NULL,
    cursor     BIGINT NOT NULL DEFAULT 0,
    created_at TEXT COLLATE "C" NOT NULL
);

CREATE INDEX webhooks_tenant_created ON webhooks (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
    id          BIGINT NOT NULL PRIMARY KEY,
    webhook_id  TEXT COLLATE "C" NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant_id   TEXT COLLATE "C" NOT NULL,
    event_id    BIGINT NOT NULL,
    event_type  TEXT COLLATE "C" NOT NULL,
    attempt     BIGINT NOT NULL,
    redelivery  BIGINT NOT NULL DEFAULT 0,
    time        TEXT COLLATE "C" NOT NULL,
    status_code BIGINT NOT NULL DEFAULT 0,
    error       TEXT COLLATE "C" NOT NULL DEFAULT '',
    duration_ns BIGINT NOT NULL DEFAULT 0,
    ok          BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, id);

CREATE INDEX webhook_deliveries_time ON webhook_deliveries (time);

CREATE TABLE tenant_quotas (
    tenant_id         TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    running_sandboxes BIGINT,
    cpus              DOUBLE PRECISION,
    memory_bytes      BIGINT,
    disk_bytes        BIGINT,
    volumes           BIGINT,
    repository_bytes  BIGINT,
    snapshots         BIGINT,
    updated_at        TEXT COLLATE "C" NOT NULL,
    state_bytes BIGINT
);

CREATE TABLE budgets (
    id                    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id             TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    sandbox_id            TEXT COLLATE "C" REFERENCES sandboxes (id) ON DELETE CASCADE,
    period                TEXT COLLATE "C" NOT NULL CHECK (period IN ('day', 'month')),
    cap_micros            BIGINT NOT NULL CHECK (cap_micros > 0),
    action                TEXT COLLATE "C" NOT NULL CHECK (action IN ('warn', 'pause', 'stop')),
    warn_at               DOUBLE PRECISION NOT NULL CHECK (warn_at > 0 AND warn_at <= 1),
    warned_period         TEXT COLLATE "C" NOT NULL DEFAULT '',
    warned_at             TEXT COLLATE "C",
    warned_spend_micros   BIGINT NOT NULL DEFAULT 0,
    warned_cap_micros     BIGINT NOT NULL DEFAULT 0,
    exceeded_period       TEXT COLLATE "C" NOT NULL DEFAULT '',
    exceeded_at           TEXT COLLATE "C",
    exceeded_spend_micros BIGINT NOT NULL DEFAULT 0,
    exceeded_cap_micros   BIGINT NOT NULL DEFAULT 0,
    created_at            TEXT COLLATE "C" NOT NULL,
    updated_at            TEXT COLLATE "C" NOT NULL
);

CREATE INDEX budgets_tenant_created ON budgets (tenant_id, created_at, id);

CREATE INDEX budgets_sandbox ON budgets (sandbox_id);

CREATE TABLE schedules (
    id          TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant_id   TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    sandbox_id  TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    cron        TEXT COLLATE "C" NOT NULL,
    tz          TEXT COLLATE "C" NOT NULL,
    action      TEXT COLLATE "C" NOT NULL,
    enabled     BIGINT NOT NULL,
    next_run_at TEXT COLLATE "C",
    last_run_at TEXT COLLATE "C",
    last_result TEXT COLLATE "C" NOT NULL DEFAULT '',
    last_error  TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL
);

CREATE INDEX schedules_tenant_created ON schedules (tenant_id, created_at, id);

CREATE INDEX schedules_sandbox ON schedules (sandbox_id);

CREATE INDEX schedules_due ON schedules (next_run_at, id) WHERE enabled = 1;

CREATE TABLE retention_policies (
    tenant_id             TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    archive_stopped_after BIGINT CHECK (archive_stopped_after >= 0),
    delete_archived_after BIGINT CHECK (delete_archived_after >= 0),
    purge_deleted_after   BIGINT CHECK (purge_deleted_after >= 0),
    warn_before           BIGINT CHECK (warn_before >= 0),
    updated_at            TEXT COLLATE "C" NOT NULL,
    session_keep_within BIGINT CHECK (session_keep_within >= 0),
    observations_keep_within BIGINT CHECK (observations_keep_within >= 0)
);

CREATE TABLE retention_warnings (
    tenant_id    TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    subject_kind TEXT COLLATE "C" NOT NULL,
    subject_id   TEXT COLLATE "C" NOT NULL,
    action       TEXT COLLATE "C" NOT NULL,
    due_at       TEXT COLLATE "C" NOT NULL,
    warned_at    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, subject_kind, subject_id, action, due_at)
);

-- store_sequences replaces SQLite's AUTOINCREMENT counters (sqlite_sequence):
-- ids are taken from here inside the writing transaction, so they are handed
-- out in commit order and never reused once committed.
CREATE TABLE store_sequences (
    name TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    seq  BIGINT NOT NULL
);

INSERT INTO store_sequences (name, seq) VALUES ('daemon_events', 0), ('webhook_deliveries', 0), ('meter_intervals', 0);

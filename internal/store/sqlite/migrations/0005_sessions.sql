-- 0005: the session log: threads → runs → events, per sandbox. Plain SQL
-- only (no engine functions, no rowids), so a PostgreSQL schema can mirror
-- this one. Purging a sandbox purges its threads, their runs and events.

CREATE TABLE session_threads (
    id             TEXT NOT NULL PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    sandbox_id     TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    keep_last      INTEGER NOT NULL,
    keep_within_ns INTEGER NOT NULL,
    created_at     TEXT NOT NULL,
    UNIQUE (sandbox_id, name)
) STRICT;

CREATE INDEX session_threads_sandbox ON session_threads (sandbox_id, created_at, id);

-- last_seq is the seq of the newest event ever appended; an append bumps it
-- with a compare-and-swap, so seqs are gap-free and never reused.
CREATE TABLE session_runs (
    id         TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    thread_id  TEXT NOT NULL REFERENCES session_threads (id) ON DELETE CASCADE,
    status     TEXT NOT NULL,
    last_seq   INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    ended_at   TEXT
) STRICT;

CREATE INDEX session_runs_thread ON session_runs (thread_id, started_at, id);

-- idem_key is NULL when the event has none; intent_seq is 0 unless the
-- event is a tool_result.
CREATE TABLE session_events (
    run_id        TEXT NOT NULL REFERENCES session_runs (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    type          TEXT NOT NULL,
    model_session TEXT NOT NULL,
    idem_key      TEXT,
    intent_seq    INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    payload       BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE UNIQUE INDEX session_events_idem ON session_events (run_id, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX session_events_intent ON session_events (run_id, intent_seq) WHERE intent_seq > 0;
CREATE INDEX session_events_type ON session_events (run_id, type, seq);

CREATE TABLE session_model_sessions (
    run_id     TEXT NOT NULL REFERENCES session_runs (id) ON DELETE CASCADE,
    id         TEXT NOT NULL,
    first_seq  INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) STRICT;

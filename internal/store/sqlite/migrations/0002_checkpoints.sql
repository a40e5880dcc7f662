-- 0002: checkpoint documents (named, versioned JSON documents per sandbox
-- and agent). Plain SQL only: composite keys instead of rowids, no engine
-- functions, so a PostgreSQL schema can mirror this one.

-- One row per document: its settings and the number of its newest version.
-- A document may exist without versions (a schema set before the first
-- write); latest is then 0. Purging a sandbox purges its documents.
CREATE TABLE checkpoint_docs (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    agent      TEXT NOT NULL,
    name       TEXT NOT NULL,
    latest     INTEGER NOT NULL,
    keep       INTEGER NOT NULL,
    schema     BLOB,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, agent, name)
) STRICT;

CREATE INDEX checkpoint_docs_tenant ON checkpoint_docs (tenant_id, sandbox_id);

-- One row per kept version. Versions of a document are numbered 1, 2, 3 ...
-- and the oldest are deleted when there are more than keep of them.
CREATE TABLE checkpoint_versions (
    sandbox_id TEXT NOT NULL,
    agent      TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    principal  TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    note       TEXT NOT NULL,
    body       BLOB NOT NULL,
    PRIMARY KEY (sandbox_id, agent, name, version),
    FOREIGN KEY (sandbox_id, agent, name)
        REFERENCES checkpoint_docs (sandbox_id, agent, name) ON DELETE CASCADE
) STRICT;

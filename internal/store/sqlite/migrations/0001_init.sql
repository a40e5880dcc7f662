-- 0001: tenants, API keys, templates and sandboxes.
-- Timestamps are fixed-width RFC 3339 UTC text with nanoseconds
-- ("2006-01-02T15:04:05.000000000Z"), so text order is time order.

CREATE TABLE tenants (
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

-- The default tenant always exists: every resource belongs to it until
-- multi-tenancy lands, and the foreign keys below require an existing tenant.
INSERT INTO tenants (id, name, created_at)
VALUES ('default', 'default', strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000000Z');

CREATE TABLE api_keys (
    id         TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,
    admin      INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
) STRICT;

CREATE INDEX api_keys_tenant_created ON api_keys (tenant_id, created_at, id);

-- A template's id is also its name, so it is unique per tenant, not globally:
-- two tenants may both import "alpine-3.20" without learning of each other.
CREATE TABLE templates (
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    id         TEXT NOT NULL,
    kind       TEXT NOT NULL,
    source     TEXT NOT NULL,
    digest     TEXT NOT NULL DEFAULT '',
    config     BLOB,
    size_bytes INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;

CREATE INDEX templates_tenant_created ON templates (tenant_id, created_at, id);

CREATE TABLE sandboxes (
    id          TEXT NOT NULL PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    name        TEXT NOT NULL,
    template_id TEXT NOT NULL,
    state       TEXT NOT NULL,
    spec        BLOB,
    stop_reason TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    started_at  TEXT,
    stopped_at  TEXT,
    deleted_at  TEXT,
    purge_at    TEXT,
    version     INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
) STRICT;

CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant_id, created_at, id);
CREATE INDEX sandboxes_created ON sandboxes (created_at, id);
CREATE INDEX sandboxes_state ON sandboxes (state);

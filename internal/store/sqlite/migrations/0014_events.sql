-- 0014: the event log (what happened to sandboxes, for SSE and webhooks),
-- the tenants' webhooks and their delivery log.
--
-- daemon_events ids are AUTOINCREMENT: an id is never used twice, even
-- after retention deleted the newest rows, so a follower's cursor ("after
-- id N") never skips a later event. The one writer connection commits
-- them in id order. Events reference nothing (no foreign keys): a purged
-- sandbox's events stay until retention.
CREATE TABLE daemon_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    time       TEXT NOT NULL,
    type       TEXT NOT NULL,
    tenant_id  TEXT NOT NULL,
    sandbox_id TEXT NOT NULL DEFAULT '',
    state      TEXT NOT NULL DEFAULT '',
    reason     TEXT NOT NULL DEFAULT '',
    data       TEXT NOT NULL DEFAULT '' -- JSON object of strings, or ''
) STRICT;

CREATE INDEX daemon_events_tenant ON daemon_events (tenant_id, id);
CREATE INDEX daemon_events_time ON daemon_events (time);

-- A webhook's cursor is the id of the last event it was given (delivered,
-- or passed over because its types do not match); its worker delivers the
-- events after it in id order.
CREATE TABLE webhooks (
    id         TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url        TEXT NOT NULL,
    types      TEXT NOT NULL DEFAULT '', -- JSON array of type prefixes, or ''
    secret     TEXT NOT NULL,
    cursor     INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
) STRICT;

CREATE INDEX webhooks_tenant_created ON webhooks (tenant_id, created_at, id);

-- One row per attempt to deliver one event to one webhook.
CREATE TABLE webhook_deliveries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id  TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant_id   TEXT NOT NULL,
    event_id    INTEGER NOT NULL,
    event_type  TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    redelivery  INTEGER NOT NULL DEFAULT 0,
    time        TEXT NOT NULL,
    status_code INTEGER NOT NULL DEFAULT 0,
    error       TEXT NOT NULL DEFAULT '',
    duration_ns INTEGER NOT NULL DEFAULT 0,
    ok          INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_time ON webhook_deliveries (time);

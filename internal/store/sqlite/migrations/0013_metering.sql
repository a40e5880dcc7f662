-- 0013: metering. A row per span a sandbox ran (open until it pauses or
-- stops; its checkpoint moves every tick, so a crash loses at most one
-- tick), and storage used per subject, kind and UTC day as byte-seconds.
-- No foreign keys to sandboxes: what a sandbox cost outlives its purge.
CREATE TABLE meter_intervals (
    id            INTEGER PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    sandbox_id    TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    cpus          REAL NOT NULL,
    memory_bytes  INTEGER NOT NULL,
    start_at      TEXT NOT NULL,
    checkpoint_at TEXT NOT NULL,
    open          INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX meter_intervals_one_open ON meter_intervals (sandbox_id) WHERE open = 1;
CREATE INDEX meter_intervals_tenant ON meter_intervals (tenant_id, checkpoint_at);

CREATE TABLE meter_storage (
    tenant_id    TEXT NOT NULL,
    subject      TEXT NOT NULL,
    kind         TEXT NOT NULL,
    day          TEXT NOT NULL,
    byte_seconds REAL NOT NULL,
    bytes        INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, day, kind, subject)
) STRICT;

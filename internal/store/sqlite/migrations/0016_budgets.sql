-- 0016: budgets: spend caps per tenant or per sandbox, per UTC day or
-- month, in micro-dollars. The enforcement state (the last warning and the
-- last crossing: period key, time, spend and cap then) lives in the row so
-- that a warning is given once per period and an action once per
-- crossing, across daemon restarts. A budget goes with its tenant and with
-- its sandbox's purge (foreign keys, in the deleting transaction).
CREATE TABLE budgets (
    id                    TEXT NOT NULL PRIMARY KEY,
    tenant_id             TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    sandbox_id            TEXT REFERENCES sandboxes (id) ON DELETE CASCADE,
    period                TEXT NOT NULL CHECK (period IN ('day', 'month')),
    cap_micros            INTEGER NOT NULL CHECK (cap_micros > 0),
    action                TEXT NOT NULL CHECK (action IN ('warn', 'pause', 'stop')),
    warn_at               REAL NOT NULL CHECK (warn_at > 0 AND warn_at <= 1),
    warned_period         TEXT NOT NULL DEFAULT '',
    warned_at             TEXT,
    warned_spend_micros   INTEGER NOT NULL DEFAULT 0,
    warned_cap_micros     INTEGER NOT NULL DEFAULT 0,
    exceeded_period       TEXT NOT NULL DEFAULT '',
    exceeded_at           TEXT,
    exceeded_spend_micros INTEGER NOT NULL DEFAULT 0,
    exceeded_cap_micros   INTEGER NOT NULL DEFAULT 0,
    created_at            TEXT NOT NULL,
    updated_at            TEXT NOT NULL
) STRICT;

CREATE INDEX budgets_tenant_created ON budgets (tenant_id, created_at, id);
CREATE INDEX budgets_sandbox ON budgets (sandbox_id);

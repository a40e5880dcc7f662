-- 0028: warm pool sizes set through the API (as SQLite's 0028): per tenant
-- and template, how many started sandboxes each node keeps ready. They
-- override the daemon's --warm defaults; a tenant's rows go with it.

CREATE TABLE warm_pools (
    tenant_id   TEXT COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    template_id TEXT COLLATE "C" NOT NULL,
    size        BIGINT NOT NULL CHECK (size >= 0),
    updated_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, template_id)
);

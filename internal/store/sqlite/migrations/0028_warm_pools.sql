-- 0028: warm pool sizes set through the API (store.WarmPoolStore): per
-- tenant and template, how many started sandboxes each node keeps ready.
-- They override the daemon's --warm defaults; a tenant's rows go with it.
CREATE TABLE warm_pools (
    tenant_id   TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    template_id TEXT NOT NULL,
    size        INTEGER NOT NULL CHECK (size >= 0),
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, template_id)
) STRICT;

-- 0020: a tenant quota on the state it keeps outside its sandboxes:
-- checkpoint versions, tasks, observations, key-value values and session
-- events, in bytes (NULL: no limit).

ALTER TABLE tenant_quotas ADD COLUMN state_bytes INTEGER;

-- 0011: tenants that can be suspended; API keys with a role, a sandbox
-- scope and an expiry. The former admin flag maps to roles: an admin key
-- becomes "admin" (everything, every tenant), every other key
-- "tenant-admin" (everything within its tenant, as before, plus its keys).
-- The admin column stays, kept equal to (role = 'admin'), for readers of
-- older versions.

ALTER TABLE tenants ADD COLUMN state TEXT NOT NULL DEFAULT 'active';
ALTER TABLE tenants ADD COLUMN suspended_at TEXT;

ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'tenant-admin';
UPDATE api_keys SET role = CASE WHEN admin != 0 THEN 'admin' ELSE 'tenant-admin' END;
-- scope is JSON ({"sandboxes": [...], "labels": {...}}); '' means unscoped.
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN expires_at TEXT;
-- rotated_to is the id of the key that replaced this one ('' for none).
ALTER TABLE api_keys ADD COLUMN rotated_to TEXT NOT NULL DEFAULT '';

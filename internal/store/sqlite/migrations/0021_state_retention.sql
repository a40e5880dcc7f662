-- 0021: a tenant's retention of the state its agents keep outside their
-- sandboxes: the default age limit of session threads made without a
-- retention of their own, and the age limit of observations (NULL: the
-- daemon's default, none).

ALTER TABLE retention_policies ADD COLUMN session_keep_within INTEGER CHECK (session_keep_within >= 0);
ALTER TABLE retention_policies ADD COLUMN observations_keep_within INTEGER CHECK (observations_keep_within >= 0);

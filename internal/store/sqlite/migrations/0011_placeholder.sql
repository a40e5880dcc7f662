-- 0011: taken by the tenants branch; this empty step keeps the versions
-- without a gap on the secrets branch. Drop this file when merging (the
-- tenants branch's 0011 replaces it).
SELECT 1;

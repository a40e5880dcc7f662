-- 0012: reserved for a branch developed in parallel (tenants and keys,
-- secrets, metering). This placeholder lets the events branch (0014) run
-- on its own; it changes nothing. DELETE THIS FILE when the branch that
-- owns 0012 is merged (two 0012 files fail loadMigrations loudly).
SELECT 1;

-- 0029: the templates each node has in its pool (store.Node.Templates), as
-- a JSON array of template dataset ids reported at every heartbeat:
-- placement sends a create (and failover and evacuate a sandbox) only to a
-- node that has the sandbox's template, or can build it (the host one).
ALTER TABLE nodes ADD COLUMN templates TEXT NOT NULL DEFAULT '[]';

-- 0029: the templates each node has in its pool (as SQLite's 0029): a JSON
-- array of template dataset ids reported at every heartbeat, for placement.
ALTER TABLE nodes ADD COLUMN templates TEXT COLLATE "C" NOT NULL DEFAULT '[]';

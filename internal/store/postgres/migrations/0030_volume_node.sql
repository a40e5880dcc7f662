-- 0030: the node whose pool holds a volume's data (as SQLite's 0030). ''
-- for a single node's volumes and for volumes made before this migration.

ALTER TABLE volumes ADD COLUMN node TEXT COLLATE "C" NOT NULL DEFAULT '';

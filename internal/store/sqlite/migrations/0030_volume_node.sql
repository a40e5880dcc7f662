-- 0030: the node whose pool holds a volume's data (store.Volume.Node), so
-- that any node of a cluster forwards the volume's routes there. '' for a
-- single node's volumes and for volumes made before this migration (they
-- are served by whichever node the request reaches).
ALTER TABLE volumes ADD COLUMN node TEXT NOT NULL DEFAULT '';

-- 0009: the volume a volume was restored from (its id on the daemon that
-- pushed it), so a sandbox restore can attach it where the push recorded
-- that volume. '' for a volume made empty.
ALTER TABLE volumes ADD COLUMN origin TEXT NOT NULL DEFAULT '';

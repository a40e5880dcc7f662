-- 0008: governance of checkpoint documents. Each document gets a policy:
-- who may write it and who may read it (any principal of the tenant, admin
-- keys only, the sandbox's own agent token only, or a listed set of API key
-- ids, comma-separated in *_keys), and its mutability (mutable,
-- append-only, immutable). Each version records the kind of principal that
-- wrote it. Plain SQL only (ADD COLUMN with constant defaults), so a
-- PostgreSQL schema can mirror this one; existing documents get the
-- default policy, which is the behaviour before this migration.

ALTER TABLE checkpoint_docs ADD COLUMN write_access TEXT NOT NULL DEFAULT 'any';
ALTER TABLE checkpoint_docs ADD COLUMN write_keys TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoint_docs ADD COLUMN read_access TEXT NOT NULL DEFAULT 'any';
ALTER TABLE checkpoint_docs ADD COLUMN read_keys TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoint_docs ADD COLUMN mutability TEXT NOT NULL DEFAULT 'mutable';

ALTER TABLE checkpoint_versions ADD COLUMN principal_kind TEXT NOT NULL DEFAULT '';

// Package state is the agent state that stead keeps outside every sandbox:
// for now, checkpoint documents. (Tasks, observations, the session log and
// orient will follow.) Service implements api.CheckpointBackend on top of a
// store.Store; the sandbox service embeds it.
//
// Checkpoint documents. A document is a named JSON value belonging to one
// sandbox and one agent within it (agent "" is the sandbox's default
// agent). Every put writes a new version, numbered 1, 2, 3 ... and recorded
// with its time and provenance: the API key that wrote it, the caller's run
// id and, for a rollback, "rollback from N". The newest Keep versions
// (default 10) are kept. A put may carry the version it expects to replace
// (If-Match), which makes read-modify-write loops safe: of two puts naming
// the same version, one wins and the other gets errs.ErrConflict. A document
// may have a JSON Schema; a put or rollback whose body fails it is
// errs.ErrInvalid and changes nothing. Each version also records the kind
// of its writer (api-key, admin, sandbox-agent).
//
// Governance. Every document has a policy: who may write it, who may read
// it, and whether it is mutable, append-only or immutable; with its history
// depth (keep) and the recorded provenance these are the seed's governance
// axes. The default policy is the behaviour without governance. The rules
// are in policy.go; a forbidden call is errs.ErrForbidden, a mutability
// violation errs.ErrConflict, and the policy is checked inside the write
// transaction, so neither changes anything.
//
// Crash ordering. A put is one store transaction: the version check, the
// schema check (run inside the transaction against the schema stored at
// that moment), the new version, the history trim and any change of Keep
// commit together. The API acknowledges a put only after that commit has
// returned, and the store makes a commit durable before it returns (SQLite:
// the WAL is fsynced). So after kill -9 of the daemon at any point, every
// acknowledged version is readable, and a put that was not acknowledged is
// either entirely present (new version, trimmed history) or entirely
// absent; a torn document, or a version whose older neighbours were
// trimmed without it being written, is never visible. A rollback reads
// version N and then puts its body as a new version; a crash in between
// leaves the document as it was.
//
// Tenancy. Every call resolves the sandbox (id or name) within the caller's
// tenant first; another tenant's sandbox is errs.ErrNotFound, exactly like
// an absent one, and the store checks the tenant again inside each write
// transaction. A soft-deleted sandbox's documents can be read but not
// written (errs.ErrConflict) until it is undeleted; purging a sandbox
// deletes its documents.
package state

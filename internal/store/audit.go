package store

import (
	"context"
	"time"
)

// AuditEntry is one record of the audit trail: who did what to which
// resource, and how it ended. The chain fields (Seq, PrevHash, Hash) are
// computed by package audit; the store keeps them as given and never
// interprets a hash beyond comparing it.
type AuditEntry struct {
	// Seq numbers the entries 1, 2, 3 ... without gaps.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Actor is the API key id of the caller, or a daemon component
	// ("daemon", ...) for transitions not made through the API.
	Actor string `json:"actor"`
	// Tenant is the tenant acted in ("" for daemon-wide actions).
	Tenant string `json:"tenant"`
	// Action names what was done, e.g. "POST /v1/sandboxes/{id}/stop".
	Action string `json:"action"`
	// Target is the resource acted on (a sandbox, volume or key id), if any.
	Target string `json:"target"`
	// Outcome is the HTTP status ("200", "409", ...) or, for daemon
	// actions, "ok" or an error text.
	Outcome string `json:"outcome"`
	// PrevHash is the previous entry's Hash (32 zero bytes before seq 1).
	PrevHash []byte `json:"prev_hash"`
	// Hash is SHA-256 over PrevHash and the fields above (package audit
	// defines the encoding).
	Hash []byte `json:"hash"`
	// Malformed says why the stored row could not be decoded as written
	// ("" when it could): a time that is not a stored time, a hash that is
	// not hex. The store still returns such a row (a hash as its raw bytes,
	// a bad time as the zero time) so that one damaged row neither hides
	// the rest of the trail nor stops the chain from being extended.
	Malformed string `json:"-"`
}

// AuditCheckpoint is a signed statement of the chain's head: "entry Seq has
// Hash, and the log starts at Start".
type AuditCheckpoint struct {
	Seq  int64  `json:"seq"`
	Hash []byte `json:"hash"`
	// Start is the first seq the log held when the checkpoint was signed
	// (1 until the log is pruned).
	Start int64     `json:"start"`
	Time  time.Time `json:"time"`
	// KeyID names the signing key (a fingerprint of its public key).
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
	// Malformed says why the stored row could not be decoded ("" when it
	// could); such a checkpoint is returned with the undecodable fields as
	// raw bytes or zero, and never verifies.
	Malformed string `json:"-"`
}

// AuditFilter selects entries for ListAudit.
type AuditFilter struct {
	// AfterSeq returns only entries with Seq > AfterSeq.
	AfterSeq int64
	// Since returns only entries with Time >= Since (zero: no limit).
	Since time.Time
	// Tenant returns only the entries of this tenant ("": every tenant).
	Tenant string
	// Limit caps the number of entries (<= 0: no cap).
	Limit int
}

// AuditStore holds the hash-chained, append-only audit trail and its
// signed checkpoints. The trail references nothing else in the store:
// purging a sandbox, volume, key or tenant leaves every entry in place.
//
// Contract, checked by storetest:
//   - AppendAudit is the only way to add an entry. e.Seq must be one more
//     than the last stored entry's Seq (1 when the trail is empty) and,
//     when there is a last entry, e.PrevHash must equal its Hash; otherwise
//     it returns errs.ErrConflict and stores nothing. Check and insert are
//     one transaction, so concurrent appenders cannot fork the chain.
//   - Entries are never changed; the only deletion is PruneAudit.
//   - Every write is durable when it returns.
//   - Lists are ordered by Seq (entries) or Seq (checkpoints), ascending.
//   - Hashes, signatures and strings round-trip byte for byte; times are
//     UTC, to the microsecond or better.
//   - Empty Action, Hash or (for checkpoints) Signature or KeyID, and a Seq
//     < 1, are errs.ErrInvalid.
//   - A stored row that cannot be decoded (edited by hand, damaged) is not
//     an error of LastAudit, ListAudit or ListAuditCheckpoints: it is
//     returned with Malformed set, a hash that is not hex as its raw bytes,
//     and AppendAudit compares e.PrevHash with the last hash in that same
//     form. Only package audit judges such rows.
type AuditStore interface {
	// AppendAudit stores e as the next entry of the chain.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// LastAudit returns the entry with the highest Seq, or
	// errs.ErrNotFound when the trail is empty.
	LastAudit(ctx context.Context) (AuditEntry, error)
	// ListAudit returns the entries f selects, by Seq.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)
	// PutAuditCheckpoint stores a checkpoint. One already stored for the
	// same Seq is errs.ErrConflict; a Seq above the last entry's is
	// errs.ErrInvalid.
	PutAuditCheckpoint(ctx context.Context, c AuditCheckpoint) error
	// ListAuditCheckpoints returns every stored checkpoint by Seq.
	ListAuditCheckpoints(ctx context.Context) ([]AuditCheckpoint, error)
	// PruneAudit is retention. In one transaction it deletes the entries
	// and the checkpoints with Seq < keepFrom and stores head (replacing a
	// checkpoint stored for head.Seq). A checkpoint for keepFrom must be
	// stored already, or keepFrom must be head.Seq, so that the remaining
	// chain stays anchored to a signed hash; otherwise it returns
	// errs.ErrInvalid and changes nothing. It returns how many entries it
	// deleted.
	PruneAudit(ctx context.Context, keepFrom int64, head AuditCheckpoint) (int64, error)
}

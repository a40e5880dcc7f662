package client

import "time"

// AuditEntry is one record of the audit trail, as listed by stead audit ls
// and written one per line by the JSONL export. Hashes are lowercase hex.
type AuditEntry struct {
	// Seq numbers the entries 1, 2, 3 ... without gaps.
	Seq  int64     `json:"seq" doc:"Position in the chain, 1, 2, 3 ..."`
	Time time.Time `json:"time"`
	// Actor is the API key id of the caller, or a daemon component.
	Actor string `json:"actor" doc:"API key id of the caller, or the daemon component (daemon, ...)"`
	// Tenant is the tenant acted in.
	Tenant string `json:"tenant"`
	// Action is the route pattern ("POST /v1/sandboxes/{id}/stop") or a
	// daemon action ("sandbox.stop").
	Action string `json:"action" doc:"Route pattern, e.g. POST /v1/sandboxes/{id}/stop, or a daemon action, e.g. sandbox.stop"`
	// Target is the resource acted on, if any.
	Target string `json:"target,omitempty"`
	// Outcome is the HTTP status, or "ok" or an error for daemon actions.
	Outcome  string `json:"outcome" doc:"HTTP status (\"200\", \"409\" ...), or ok / an error text for daemon actions"`
	PrevHash string `json:"prev_hash" doc:"Hash of the previous entry (hex)"`
	Hash     string `json:"hash" doc:"SHA-256 of prev_hash and this entry's fields (hex)"`
}

// AuditCheckpoint is an ed25519-signed statement of the chain's head.
type AuditCheckpoint struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash" doc:"Hash of entry seq (hex)"`
	// Start is the first seq the trail held when it was signed.
	Start     int64     `json:"start" doc:"First seq the trail held when signed (1 until pruned)"`
	Time      time.Time `json:"time"`
	KeyID     string    `json:"key_id"`
	Signature string    `json:"signature" doc:"ed25519 signature (hex)"`
}

// AuditReport is the result of verifying the audit trail.
type AuditReport struct {
	// OK is true when the chain is intact from its first entry to its last
	// and every checkpoint is validly signed and matches it.
	OK bool `json:"ok"`
	// FirstSeq and LastSeq bound the entries held (0 when there are none).
	FirstSeq int64 `json:"first_seq"`
	LastSeq  int64 `json:"last_seq"`
	Entries  int64 `json:"entries"`
	// Checkpoints is how many signed checkpoints were checked.
	Checkpoints int `json:"checkpoints"`
	// SignedSeq is the seq of the newest checkpoint (0: none); the entries
	// after it (Unsigned of them) are protected by the hash chain alone.
	SignedSeq int64 `json:"signed_seq"`
	Unsigned  int64 `json:"unsigned"`
	// BadSeq is the first seq at which the trail was found altered (0 when
	// OK), and Problem says what is wrong there.
	BadSeq  int64  `json:"bad_seq,omitempty"`
	Problem string `json:"problem,omitempty"`
	// KeyID and PublicKey (hex) identify the key the checkpoints must be
	// signed with.
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	// Problems lists what was found, by seq (the first is BadSeq and
	// Problem); empty when OK.
	Problems []AuditProblem `json:"problems"`
	// Witnesses are the copies of the newest signed checkpoint kept
	// outside the database (a file beside it, the repository), and how
	// the database compares with each.
	Witnesses []AuditWitness `json:"witnesses"`
}

// AuditProblem is one thing Verify found wrong with the trail.
type AuditProblem struct {
	// Seq is the first seq concerned (0: the trail as a whole).
	Seq int64 `json:"seq"`
	// Kind classifies it: "altered" (an entry's contents), "deleted" (an
	// entry missing at the front or in the middle), "inserted",
	// "relinked" (a link broken: inserted, removed, replaced or reordered
	// entries), "truncated" (entries missing at the end), "rewritten" (a
	// consistent rewrite caught by a signed hash), "checkpoint-forged",
	// "checkpoint-missing", "malformed" (a row the store cannot decode) or
	// "witness" (a witness missing, unreadable or signed by another key).
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// AuditWitness is one witness of the trail and how the database compares
// with it.
type AuditWitness struct {
	// Name says where it is kept ("file /var/lib/stead/audit.witness",
	// "repository s3://...").
	Name string `json:"name"`
	// Seq, Hash (hex), Start and Time are those of the checkpoint it holds
	// (Seq 0: it holds none or could not be read).
	Seq   int64     `json:"seq,omitempty"`
	Hash  string    `json:"hash,omitempty"`
	Start int64     `json:"start,omitempty"`
	Time  time.Time `json:"time,omitzero"`
	// OK is true when the database holds the witnessed entry with the
	// witnessed hash and its signed checkpoint (or the entry was pruned
	// since). A witness that could not be compared for a reason other
	// than damage (a repository not initialised or unreachable, nothing
	// written there yet) is not OK but is not a problem either.
	OK bool `json:"ok"`
	// Note says what is wrong or why it was not compared (or, when OK,
	// anything worth knowing).
	Note string `json:"note,omitempty"`
}

// AuditQuery selects entries for ListAudit and ExportAudit.
type AuditQuery struct {
	// Since returns only entries at or after this time.
	Since time.Time
	// After returns only entries with a greater seq (paging).
	After int64
	// Limit caps how many entries ListAudit returns (server default 100,
	// at most 1000); ExportAudit ignores it.
	Limit int
}

package client

import "time"

// AuditEntry is one record of the audit trail, as listed by stead audit ls
// and written one per line by the JSONL export. Hashes are lowercase hex.
type AuditEntry struct {
	// Seq numbers the entries 1, 2, 3 ... without gaps.
	Seq  int64     `json:"seq" doc:"Position in the chain, 1, 2, 3 ..."`
	Time time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	// Actor is the API key id of the caller, or a daemon component.
	Actor string `json:"actor" doc:"API key id of the caller, or the daemon component (daemon, ...)"`
	// Tenant is the tenant acted in.
	Tenant string `json:"tenant" doc:"Tenant is the tenant acted in."`
	// Action is the route pattern ("POST /v1/sandboxes/{id}/stop") or a
	// daemon action ("sandbox.stop").
	Action string `json:"action" doc:"Route pattern, e.g. POST /v1/sandboxes/{id}/stop, or a daemon action, e.g. sandbox.stop"`
	// Target is the resource acted on, if any.
	Target string `json:"target,omitempty" doc:"Target is the resource acted on, if any."`
	// Outcome is the HTTP status, or "ok" or an error for daemon actions.
	Outcome  string `json:"outcome" doc:"HTTP status (\"200\", \"409\" ...), or ok / an error text for daemon actions"`
	PrevHash string `json:"prev_hash" doc:"Hash of the previous entry (hex)"`
	Hash     string `json:"hash" doc:"SHA-256 of prev_hash and this entry's fields (hex)"`
}

// AuditCheckpoint is an ed25519-signed statement of the chain's head.
type AuditCheckpoint struct {
	Seq  int64  `json:"seq" doc:"Position in the log, 1, 2, 3 ..."`
	Hash string `json:"hash" doc:"Hash of entry seq (hex)"`
	// Start is the first seq the trail held when it was signed.
	Start     int64     `json:"start" doc:"First seq the trail held when signed (1 until pruned)"`
	Time      time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	KeyID     string    `json:"key_id" doc:"Id of the API key"`
	Signature string    `json:"signature" doc:"ed25519 signature (hex)"`
}

// AuditReport is the result of verifying the audit trail.
type AuditReport struct {
	// OK is true when the chain is intact from its first entry to its last
	// and every checkpoint is validly signed and matches it.
	OK bool `json:"ok" doc:"OK is true when the chain is intact from its first entry to its last and every checkpoint is validly signed and matches it."`
	// FirstSeq and LastSeq bound the entries held (0 when there are none).
	FirstSeq int64 `json:"first_seq" doc:"FirstSeq and LastSeq bound the entries held (0 when there are none)."`
	LastSeq  int64 `json:"last_seq" doc:"Seq of the last entry"`
	Entries  int64 `json:"entries" doc:"The entries"`
	// Checkpoints is how many signed checkpoints were checked.
	Checkpoints int `json:"checkpoints" doc:"Checkpoints is how many signed checkpoints were checked."`
	// SignedSeq is the seq of the newest checkpoint (0: none); the entries
	// after it (Unsigned of them) are protected by the hash chain alone.
	SignedSeq int64 `json:"signed_seq" doc:"SignedSeq is the seq of the newest checkpoint (0: none); the entries after it (Unsigned of them) are protected by the hash chain alone."`
	Unsigned  int64 `json:"unsigned" doc:"Entries after the last signed checkpoint"`
	// BadSeq is the first seq at which the trail was found altered (0 when
	// OK), and Problem says what is wrong there.
	BadSeq  int64  `json:"bad_seq,omitempty" doc:"BadSeq is the first seq at which the trail was found altered (0 when OK), and Problem says what is wrong there."`
	Problem string `json:"problem,omitempty" doc:"What is wrong, if anything"`
	// KeyID and PublicKey (hex) identify the key the checkpoints must be
	// signed with.
	KeyID     string `json:"key_id" doc:"KeyID and PublicKey (hex) identify the key the checkpoints must be signed with."`
	PublicKey string `json:"public_key" doc:"Public key (base64)"`
	// Problems lists what was found, by seq (the first is BadSeq and
	// Problem); empty when OK.
	Problems []AuditProblem `json:"problems" doc:"Problems lists what was found, by seq (the first is BadSeq and Problem); empty when OK."`
	// Witnesses are the copies of the newest signed checkpoint kept
	// outside the database (a file beside it, the repository), and how
	// the database compares with each.
	Witnesses []AuditWitness `json:"witnesses" doc:"Witnesses are the copies of the newest signed checkpoint kept outside the database (a file beside it, the repository), and how the database compares with each."`
}

// AuditProblem is one thing Verify found wrong with the trail.
type AuditProblem struct {
	// Seq is the first seq concerned (0: the trail as a whole).
	Seq int64 `json:"seq" doc:"Seq is the first seq concerned (0: the trail as a whole)."`
	// Kind classifies it: "altered" (an entry's contents), "deleted" (an
	// entry missing at the front or in the middle), "inserted",
	// "relinked" (a link broken: inserted, removed, replaced or reordered
	// entries), "truncated" (entries missing at the end), "rewritten" (a
	// consistent rewrite caught by a signed hash), "checkpoint-forged",
	// "checkpoint-missing", "malformed" (a row the store cannot decode) or
	// "witness" (a witness missing, unreadable or signed by another key).
	Kind string `json:"kind" doc:"Kind classifies it: \"altered\" (an entry's contents), \"deleted\" (an entry missing at the front or in the middle), \"inserted\", \"relinked\" (a link broken: inserted, removed, replaced or reordered entries), \"truncated\" (entries missing at the end), \"rewritten\" (a consistent rewrite caught by a signed hash), \"checkpoint-forged\", \"checkpoint-missing\", \"malformed\" (a row the store cannot decode) or \"witness\" (a witness missing, unreadable or signed by another key)."`
	Text string `json:"text" doc:"Text"`
}

// AuditWitness is one witness of the trail and how the database compares
// with it.
type AuditWitness struct {
	// Name says where it is kept ("file /var/lib/stead/audit.witness",
	// "repository s3://...").
	Name string `json:"name" doc:"Name says where it is kept (\"file /var/lib/stead/audit.witness\", \"repository s3://...\")."`
	// Seq, Hash (hex), Start and Time are those of the checkpoint it holds
	// (Seq 0: it holds none or could not be read).
	Seq   int64     `json:"seq,omitempty" doc:"Seq, Hash (hex), Start and Time are those of the checkpoint it holds (Seq 0: it holds none or could not be read)."`
	Hash  string    `json:"hash,omitempty" doc:"Hash (hex)"`
	Start int64     `json:"start,omitempty" doc:"Start (RFC 3339)"`
	Time  time.Time `json:"time,omitzero" doc:"When it happened (RFC 3339)"`
	// OK is true when the database holds the witnessed entry with the
	// witnessed hash and its signed checkpoint (or the entry was pruned
	// since). A witness that could not be compared for a reason other
	// than damage (a repository not initialised or unreachable, nothing
	// written there yet) is not OK but is not a problem either.
	OK bool `json:"ok" doc:"OK is true when the database holds the witnessed entry with the witnessed hash and its signed checkpoint (or the entry was pruned since). A witness that could not be compared for a reason other than damage (a repository not initialised or unreachable, nothing written there yet) is not OK but is not a problem either."`
	// Note says what is wrong or why it was not compared (or, when OK,
	// anything worth knowing).
	Note string `json:"note,omitempty" doc:"Note says what is wrong or why it was not compared (or, when OK, anything worth knowing)."`
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

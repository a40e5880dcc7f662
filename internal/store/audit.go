package store

// AuditStore holds the hash-chained audit trail. (Filled in by the audit
// work.)
type AuditStore interface{}

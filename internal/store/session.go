package store

// SessionStore holds session logs (thread → run → model session events).
// (Filled in by the session-log work.)
type SessionStore interface{}

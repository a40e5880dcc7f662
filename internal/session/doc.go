// Package session is stead's session log: an append-only record, kept
// outside every sandbox, of what an agent did. Sessions implements
// api.SessionBackend on top of a store.Store; the sandbox service embeds it.
//
// Model. A sandbox has threads (named conversations); a thread has runs
// (one execution each: running until ended as completed, failed, canceled
// or interrupted); events are appended to a run and numbered 1, 2, 3 ... by
// the store. An event has a type (model_call, tool_intent, tool_result,
// error, approval_requested, approval_granted, approval_denied, checkpoint,
// compaction, note), a JSON payload of at most 256 KiB, optionally the id
// of the model session it belongs to, optionally an idempotency key and,
// for a tool_result, the seq of the tool_intent it answers.
//
// Idempotency. A harness that does not know whether an append reached the
// daemon retries it with the same idempotency keys: events whose key the
// run already holds are not stored again, and the original events come
// back. A key reused for a different event is errs.ErrConflict. A key is
// remembered as long as its event is kept (retention may delete it).
//
// In doubt. Before a harness performs an external side effect it appends a
// tool_intent; after, a tool_result naming the intent's seq. After a crash,
// ResumeRun lists every intent without a result: the harness must check
// those side effects instead of repeating them blindly. It also returns
// the last safe point: the run's last checkpoint event, else its last
// event.
//
// Crash ordering. A batch append is one store transaction: the idempotency
// lookups, the intent checks, the new events, the run's last seq and the
// thread's retention commit together or not at all, and the store makes a
// commit durable before it returns (SQLite: the WAL is fsynced, synchronous
// FULL). The API acknowledges an append only after that. So after kill -9
// of the daemon at any point, every acknowledged event is readable with the
// seq it was acknowledged with, and an unacknowledged batch is either
// entirely present or entirely absent; retrying it with its idempotency
// keys converges on exactly one copy.
//
// Retention. A thread may keep only the newest N events of each run and/or
// the events younger than T; an event is deleted when no set rule keeps it
// (on every append to the run, and by PruneThread for the whole thread). A
// run's newest event, its newest checkpoint event and its in-doubt tool
// intents are never deleted, so ResumeRun stays truthful. Seqs are never
// reused.
//
// Following. WatchRun hands out a channel per run that the next append or
// end closes (an in-process notifier; an append by another process sharing
// the store is seen at the follower's next poll).
//
// Tenancy. Every call resolves the sandbox (id or name) within the
// caller's tenant first; another tenant's sandbox is errs.ErrNotFound,
// exactly like an absent one, and the store checks the tenant again in
// every query. A soft-deleted sandbox's log can be read but not written
// (errs.ErrConflict); purging a sandbox deletes its log.
package session

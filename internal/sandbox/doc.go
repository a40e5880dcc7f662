// Package sandbox is node-local: it runs the sandboxes this node holds.
// Its service does the lifecycle state machine (creating → running ⇄
// paused → stopped → deleted), instance types, templates, exec, files,
// ports, the agent socket, volumes and local snapshots in this node's
// pool, the node's policies (auto-stop, TTL, archive, retention,
// schedules, limits), push to and restore from the repository of the
// sandboxes it holds, adopt and evacuate (the node's side of failover and
// of a move), and start-up reconciliation. It implements api.Backend on top
// of a store.Store, a pool.Pool and a runtime.Runtime.
//
// What is cluster-wide is elsewhere and embedded, so that the API reaches
// it through this one service: tenants, keys, sandbox tokens, secrets,
// quotas and budgets in internal/tenancy (tenancy.go has the node's calls
// into it: quota admission at create, start, snapshot and push; may-run of
// the tenant and of its budgets; the secrets a starting sandbox
// references); agent state in internal/state, internal/session and
// internal/tasks; the audit trail in internal/audit. Those read and write
// the shared store only, so any node serves them.
//
// In a cluster (Options.Owner), every write this package makes of a
// sandbox record, and of a snapshot record of a sandbox (how a push is
// published), is fenced by the node's lease on that sandbox: it commits
// only while the lease is current (ownership.go). Reads are served by any
// node. Tenant-level writes (suspension, keys, quotas, secrets) are not
// sandbox records and are not fenced.
//
// Still mixed here: suspending and deleting a tenant (tenant_purge.go)
// stop and purge every sandbox of the tenant through this node's
// lifecycle verbs, which refuse sandboxes another node holds; and the
// record reads for the API (list, get, history) are served from the store
// by whichever node is asked, as the cluster-wide half would.
//
// Crash ordering: a lifecycle change is written to the store only after the
// runtime and pool have done it (a sandbox is "running" in the store only
// once its init answers; "stopped" only once its processes are gone). After
// a kill -9 of the daemon, Reconcile makes the store agree with the runtime:
// running sandboxes are re-adopted, vanished ones are marked stopped, and
// half-created ones are removed.
package sandbox

// Package tenancy is cluster-wide: any node serves it from the shared
// store. It holds what belongs to a tenant rather than to a machine:
// tenants and their suspension, API keys, roles and the check of a key or
// a sandbox token (auth.go), tenant secrets and the key that seals them
// (tenant_secrets.go, sealkey.go), quotas and their admission
// (quotas.go, statequota.go), the label rules a key's selector shares with
// sandboxes (labels.go), and the budget API with its may-run check
// (budgets.go).
//
// Nothing here touches a pool, a runtime or a running sandbox. What acts
// on sandboxes (stopping a suspended tenant's sandboxes, purging a deleted
// tenant, a budget's pause or stop, opening secrets into a starting
// sandbox) is node-local and lives in internal/sandbox, which embeds a
// *Service and calls it for its checks: quota admission at create, start,
// snapshot and push; may-run of a tenant and of its budgets; the values of
// the secrets a sandbox references.
//
// State kept in memory is per process, and therefore per node: the quota
// admission's pending rises and the state_bytes count (quotas.go,
// statequota.go). Their stored halves (the records a rise becomes) are in
// the shared store, so a node sees what the others committed, not what
// they are about to commit (see the atomicity paragraph in quotas.go).
//
// The package must not import internal/sandbox: what it needs of the node
// (a tenant's bytes in the repository) it asks through RepoUsage.
package tenancy

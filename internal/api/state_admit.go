package api

import "context"

// StateAdmitFunc is asked before a write adds bytes to the state a tenant
// keeps outside its sandboxes (checkpoint versions, tasks, observations,
// key-value values, session events); an error refuses the write, which
// then changes nothing. The sandbox service's is the tenant's state_bytes
// quota.
type StateAdmitFunc func(ctx context.Context, tenant string, bytes int64) error

// Admit asks f when it is set (a nil StateAdmitFunc admits everything).
func (f StateAdmitFunc) Admit(ctx context.Context, tenant string, bytes int64) error {
	if f == nil {
		return nil
	}
	return f(ctx, tenant, bytes)
}

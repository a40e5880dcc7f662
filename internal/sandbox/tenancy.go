package sandbox

import (
	"context"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

// The node's calls into the cluster-wide half (internal/tenancy). The
// service embeds a *tenancy.Service, which serves the tenant, key, secret,
// quota and budget routes itself; the node-local code asks it here for
// its checks, under the names it always used.

// Tenancy is the cluster-wide service of tenants the sandbox service
// embeds (as Tenancy: state.Service is embedded as Service already).
type Tenancy = tenancy.Service

// wireTenancy (re)makes the embedded tenancy service from the options. It
// reads the store unfenced (tenant records are no sandbox's), the clock,
// the audit recorder and the event sink through the service, so that a
// test moving the clock or replacing the recorder moves both halves.
func (s *Service) wireTenancy() {
	node := "" // a single node admits quota rises in memory; a cluster in the store
	if s.clustered() {
		node = s.opts.Owner.Node()
	}
	s.Tenancy = tenancy.New(tenancy.Options{
		Node:     node,
		Store:    s.opts.Store,
		Logger:   s.log,
		Now:      func() time.Time { return s.opts.Now() },
		Audit:    recorderOf{s},
		Events:   events.SinkFunc(func(ctx context.Context, e events.Event) { s.emit(ctx, e) }),
		TokenKey: s.opts.TokenKey,
		Keys:     s.secrets,
		Repo:     repoUsage{s},
	})
}

// emit passes e to the service's event sink, if any.
func (s *Service) emit(ctx context.Context, e events.Event) {
	if s.opts.Events != nil {
		s.opts.Events.Emit(ctx, e)
	}
}

// recorderOf records through the service's current recorder.
type recorderOf struct{ s *Service }

func (r recorderOf) Record(ctx context.Context, e audit.Entry) error { return r.s.rec.Record(ctx, e) }

func (s *Service) getTenant(ctx context.Context, id string) (store.Tenant, error) {
	return s.ReadTenant(ctx, id)
}

func (s *Service) tenantMayRun(ctx context.Context, tenant string) error {
	return s.TenantMayRun(ctx, tenant)
}

func (s *Service) budgetMayRun(ctx context.Context, tenant, id string) error {
	return s.BudgetMayRun(ctx, tenant, id)
}

func (s *Service) admitState(ctx context.Context, tenant string, n int64) error {
	return s.AdmitState(ctx, tenant, n)
}

func (s *Service) checkSecretsSet(ctx context.Context, tenant string, refs []client.SecretRef) error {
	return s.CheckSecretsSet(ctx, tenant, refs)
}

func (s *Service) secretRefs(ctx context.Context, tenant string, req client.CreateSandboxRequest) ([]client.SecretRef, error) {
	return s.SecretRefs(ctx, tenant, req)
}

func checkLabels(l map[string]string) error { return tenancy.CheckLabels(l) }

var (
	_ api.Backend           = (*Service)(nil)
	_ api.CheckpointBackend = (*Service)(nil)
	_ api.SnapshotBackend   = (*Service)(nil)
	_ api.VolumeBackend     = (*Service)(nil)
	_ api.AuditBackend      = (*Service)(nil)
	_ api.SessionBackend    = (*Service)(nil)
	_ api.OrientBackend     = (*Service)(nil)
	_ api.TaskBackend       = (*Service)(nil)
	_ api.TenantBackend     = (*Service)(nil)
	_ api.SecretBackend     = (*Service)(nil)
	_ api.QuotaBackend      = (*Service)(nil)
	_ api.BudgetBackend     = (*Service)(nil)
)

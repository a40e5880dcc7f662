package tenancy

import (
	"context"
	"log/slog"
	"time"

	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// Options configure a Service.
type Options struct {
	// Store is the shared store (required).
	Store store.Store
	// Logger logs (default slog.Default()).
	Logger *slog.Logger
	// Now returns the current time (default time.Now; tests may move it).
	Now func() time.Time
	// Audit records the transitions the service makes on its own (a
	// tenant's suspension). Nil records nothing.
	Audit audit.Recorder
	// Events hears quota refusals (quota.exceeded). Nil hears nothing.
	Events events.Sink
	// TokenKey signs sandbox-scoped tokens (HMAC-SHA256); it must be the
	// same on every node and across restarts. Without it sandboxes get no
	// token and none is accepted.
	TokenKey []byte
	// Keys seals tenant secrets (and, in internal/sandbox, the
	// environment given at create). Nil: a key kept in memory only
	// (tests).
	Keys *SecretKey
	// Repo reads a tenant's bytes in the repository for the
	// repository_bytes quota (nil: no repository is configured).
	Repo RepoUsage
	// Node, in a cluster, is this node's name: quota admission then holds
	// its pending rises in the store, under the tenant's admission lock,
	// so that they hold across the nodes (quotas.go). "" (a single node):
	// in this process's memory.
	Node string
	// RiseTTL is how long a rise admitted in a cluster counts if its node
	// never releases it (it died before storing the record): 0 is
	// DefaultRiseTTL.
	RiseTTL time.Duration
}

// DefaultRiseTTL is how long a rise admitted in a cluster counts at most:
// longer than any operation between its admission and its record's store
// (a create, a restore), so a rise stops counting early only when its node
// died.
const DefaultRiseTTL = 30 * time.Minute

// RepoUsage is what the quotas read of the off-box repository. The node's
// sandbox service implements it (it opens the repository).
type RepoUsage interface {
	// RepoConfigured reports whether a repository is configured at all.
	RepoConfigured() bool
	// OpenRepoUsage opens the repository, returning its error as it is
	// (repo.ErrNoRepository when none is initialised), and returns how to
	// read what a tenant's pushes keep in it (0 for a tenant that never
	// pushed).
	OpenRepoUsage(ctx context.Context) (func(ctx context.Context, tenant string) (int64, error), error)
}

// Service serves tenants, keys, secrets, quotas and budgets from the
// shared store.
type Service struct {
	opts    Options
	st      store.Store
	log     *slog.Logger
	rec     audit.Recorder
	secrets *SecretKey
	quota   quotaGates
	budgets Budgets // budgets.go
}

// New returns a service on opts.Store.
func New(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Keys == nil {
		opts.Keys = NewSecretKey("", nil)
	}
	if opts.RiseTTL <= 0 {
		opts.RiseTTL = DefaultRiseTTL
	}
	s := &Service{opts: opts, st: opts.Store, log: opts.Logger, rec: audit.Nop{}, secrets: opts.Keys}
	if opts.Audit != nil {
		s.rec = opts.Audit
	}
	return s
}

func (s *Service) now() time.Time { return s.opts.Now().UTC() }

func (s *Service) event(ctx context.Context, typ, tenant, sandbox string, data map[string]string) {
	if s.opts.Events == nil {
		return
	}
	s.opts.Events.Emit(context.WithoutCancel(ctx), events.Event{Time: s.now(), Type: typ, Tenant: tenant, Sandbox: sandbox, Data: data})
}

func (s *Service) record(ctx context.Context, tenant, action, target string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	if rerr := s.rec.Record(context.WithoutCancel(ctx), audit.Entry{Actor: "daemon", Tenant: tenant, Action: action, Target: target, Outcome: outcome}); rerr != nil {
		s.log.Error("audit record", "action", action, "target", target, "err", rerr)
	}
}

package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/guest"
	"github.com/stead-dev/stead/internal/network/policy"
	"github.com/stead-dev/stead/internal/pool"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// The warm pool holds, per tenant and template, sandboxes that are
// already cloned and started, so that a plain create only has to give one
// its identity.
//
// A warm sandbox has no record in the store: it belongs to no tenant, no
// list or get shows it, no quota or meter counts it. It exists as a
// dataset, a running runtime container and a network attachment under a
// fresh id, and in the pool's memory. Taking one is a single insert of its
// record (already running, under the caller's tenant and name): the
// record appears whole or not at all.
//
// Crash ordering: a warm sandbox's dataset and container exist before any
// record does, so after a crash or a restart every one of them is an
// orphan: Reconcile kills the runtime state of ids without a record and
// drops their network, and dropWarmLeftovers (run before the pool fills)
// deletes their datasets. Warm sandboxes are never carried across a
// restart; the pool refills instead.
//
// What a create from the pool differs in (README, "Warm pool"): the
// sandbox booted before its create (its processes' start times and
// /proc/uptime are older than created_at), and its hostname is its id
// until its first restart. A create that needs something applied at boot
// does not use the pool: a service, volumes, secret files, another
// instance type or disk size, --no-start, a snapshot, a fork or a restore.

// WarmSpec asks for Size warm sandboxes of one template of one tenant.
type WarmSpec struct {
	// Tenant owns the template ("" means store.DefaultTenant).
	Tenant string
	// Template is the template id (e.g. "host").
	Template string
	// Size is how many sandboxes are kept ready.
	Size int
}

// ParseWarmSpec parses "[TENANT/]TEMPLATE=N", the form of
// `stead serve --warm`.
func ParseWarmSpec(s string) (WarmSpec, error) {
	key, num, ok := strings.Cut(s, "=")
	if !ok {
		return WarmSpec{}, fmt.Errorf("warm pool %q: want [TENANT/]TEMPLATE=N, such as host=4: %w", s, errs.ErrInvalid)
	}
	var w WarmSpec
	if t, tmpl, ok := strings.Cut(key, "/"); ok {
		w.Tenant, w.Template = t, tmpl
		if t == "" {
			return WarmSpec{}, fmt.Errorf("warm pool %q: empty tenant: %w", s, errs.ErrInvalid)
		}
	} else {
		w.Template = key
	}
	if w.Tenant == "" {
		w.Tenant = store.DefaultTenant
	}
	if err := checkName("template", w.Template); err != nil {
		return WarmSpec{}, fmt.Errorf("warm pool %q: %w", s, err)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n > 1000 {
		return WarmSpec{}, fmt.Errorf("warm pool %q: size %q is not a number from 0 to 1000: %w", s, num, errs.ErrInvalid)
	}
	w.Size = n
	return w, nil
}

type warmKey struct{ tenant, template string }

// warmPool is the service's pool state.
type warmPool struct {
	mu sync.Mutex
	// defaults are the sizes of `serve --warm`; specs are the sizes in
	// force: the defaults overridden by the sizes set through the API
	// (store.WarmPoolStore), read again at every pass.
	defaults map[warmKey]int
	specs    map[warmKey]int
	ready    map[warmKey][]string // ids, oldest first
	pending  map[warmKey]int      // being made
	wake     chan struct{}
	taken    atomic.Int64
	made     atomic.Int64
	warmedUp atomic.Int64 // warm-up execs that succeeded (warmUp)
}

// WarmStats reports what the warm pool did.
type WarmStats struct {
	// Ready is the number of warm sandboxes held now.
	Ready int
	// Taken counts creates served from the pool.
	Taken int64
	// Made counts warm sandboxes made.
	Made int64
}

// WarmStats returns the pool's counters.
func (s *Service) WarmStats() WarmStats {
	w := &s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, ids := range w.ready {
		n += len(ids)
	}
	return WarmStats{Ready: n, Taken: w.taken.Load(), Made: w.made.Load()}
}

// RunWarm keeps the warm pools of specs filled until ctx ends, then
// destroys the warm sandboxes still held. Call it after Reconcile (which
// removes the warm sandboxes of an earlier daemon).
func (s *Service) RunWarm(ctx context.Context, specs []WarmSpec) {
	w := &s.warm
	w.mu.Lock()
	w.defaults = map[warmKey]int{}
	w.specs = map[warmKey]int{}
	w.ready = map[warmKey][]string{}
	w.pending = map[warmKey]int{}
	w.wake = make(chan struct{}, 1)
	for _, sp := range specs {
		t := sp.Tenant
		if t == "" {
			t = store.DefaultTenant
		}
		w.defaults[warmKey{t, sp.Template}] = sp.Size
	}
	w.mu.Unlock()
	tick := time.NewTicker(5 * time.Second) // retry after a failure; see sizes set elsewhere
	defer tick.Stop()
	for {
		s.resizeWarm(ctx)
		s.fillWarm(ctx)
		select {
		case <-ctx.Done():
			s.drainWarm(context.WithoutCancel(ctx))
			return
		case <-w.wake:
		case <-tick.C:
		}
	}
}

// resizeWarm reads the sizes in force (the defaults overridden by the
// sizes set through the API) and destroys the ready sandboxes of a pool
// beyond its size, oldest first.
func (s *Service) resizeWarm(ctx context.Context) {
	set, err := s.st.ListWarmPools(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("read the warm pool sizes; keeping the last ones", "err", err)
		}
		return
	}
	w := &s.warm
	w.mu.Lock()
	specs := make(map[warmKey]int, len(w.defaults)+len(set))
	for k, n := range w.defaults {
		specs[k] = n
	}
	for _, p := range set {
		specs[warmKey{p.TenantID, p.TemplateID}] = p.Size
	}
	w.specs = specs
	var extra []string
	for k, ids := range w.ready {
		if n := specs[k]; len(ids) > n {
			extra = append(extra, ids[:len(ids)-n]...)
			w.ready[k] = append([]string(nil), ids[len(ids)-n:]...)
		}
	}
	w.mu.Unlock()
	for _, id := range extra {
		s.destroyWarm(ctx, id)
	}
}

// wakeWarm makes the pool loop look at its sizes now.
func (s *Service) wakeWarm() {
	w := &s.warm
	w.mu.Lock()
	wake := w.wake
	w.mu.Unlock()
	if wake == nil {
		return
	}
	select {
	case wake <- struct{}{}:
	default:
	}
}

// ListWarmPools lists the warm pools in force with what this node holds
// ready (admin only: api.WarmPoolBackend).
func (s *Service) ListWarmPools(ctx context.Context) ([]client.WarmPool, error) {
	set, err := s.st.ListWarmPools(ctx, "")
	if err != nil {
		return nil, err
	}
	w := &s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	byKey := map[warmKey]client.WarmPool{}
	for k, n := range w.defaults {
		byKey[k] = client.WarmPool{Tenant: k.tenant, Template: k.template, Size: n, Source: "default"}
	}
	for _, p := range set {
		at := p.UpdatedAt
		byKey[warmKey{p.TenantID, p.TemplateID}] = client.WarmPool{Tenant: p.TenantID, Template: p.TemplateID, Size: p.Size, Source: "api", UpdatedAt: &at}
	}
	out := make([]client.WarmPool, 0, len(byKey))
	for k, p := range byKey {
		p.Ready = len(w.ready[k])
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b client.WarmPool) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Template, b.Template))
	})
	return out, nil
}

// SetWarmPool sets the size of the warm pool of tenant's template; it
// overrides the daemon's default and applies at once, without a restart.
func (s *Service) SetWarmPool(ctx context.Context, tenant, template string, size int) (client.WarmPool, error) {
	if size < 0 || size > store.MaxWarmPoolSize {
		return client.WarmPool{}, fmt.Errorf("warm pool size %d: want 0 to %d: %w", size, store.MaxWarmPoolSize, errs.ErrInvalid)
	}
	if _, err := s.st.GetTenant(ctx, tenant); err != nil {
		return client.WarmPool{}, fmt.Errorf("warm pool of tenant %s: %w", tenant, err)
	}
	if _, err := s.template(ctx, tenant, template); err != nil {
		return client.WarmPool{}, fmt.Errorf("warm pool of template %s: %w", template, err)
	}
	p, err := s.st.SetWarmPool(ctx, store.WarmPool{TenantID: tenant, TemplateID: template, Size: size})
	if err != nil {
		return client.WarmPool{}, err
	}
	s.wakeWarm()
	s.log.Info("warm pool size set", "tenant", tenant, "template", template, "size", size)
	return client.WarmPool{Tenant: tenant, Template: template, Size: p.Size, Source: "api", UpdatedAt: &p.UpdatedAt}, nil
}

// DeleteWarmPool removes the size set through the API for tenant's
// template: the daemon's default applies again.
func (s *Service) DeleteWarmPool(ctx context.Context, tenant, template string) error {
	if err := s.st.DeleteWarmPool(ctx, tenant, template); err != nil {
		return err
	}
	s.wakeWarm()
	return nil
}

// fillWarm makes warm sandboxes until every pool is full or one fails.
func (s *Service) fillWarm(ctx context.Context) {
	w := &s.warm
	for ctx.Err() == nil {
		var key warmKey
		found := false
		w.mu.Lock()
		for k, n := range w.specs {
			if len(w.ready[k])+w.pending[k] < n {
				key, found = k, true
				w.pending[k]++
				break
			}
		}
		w.mu.Unlock()
		if !found {
			return
		}
		id, err := s.makeWarm(ctx, key)
		w.mu.Lock()
		w.pending[key]--
		if err == nil {
			w.ready[key] = append(w.ready[key], id)
		}
		w.mu.Unlock()
		if err != nil {
			s.log.Error("make a warm sandbox", "tenant", key.tenant, "template", key.template, "err", err)
			return
		}
		w.made.Add(1)
	}
}

// warmSpec is the spec a warm sandbox boots with: the default instance
// type, no environment, the default network policy.
func warmSpec() spec {
	it, _ := lookupInstanceType("")
	return spec{InstanceType: it.Name, Limits: it.Limits, OnIdle: "stop", IdleTimeout: 15 * time.Minute}
}

// makeWarm clones and starts one warm sandbox.
func (s *Service) makeWarm(ctx context.Context, key warmKey) (string, error) {
	tmpl, err := s.template(ctx, key.tenant, key.template)
	if err != nil {
		return "", err
	}
	if err := s.templateHere(ctx, tmpl); err != nil {
		return "", err
	}
	id := newID()
	sp := warmSpec()
	specJSON, _ := json.Marshal(sp)
	sb := store.Sandbox{ID: id, TenantID: key.tenant, Name: id, TemplateID: tmpl.ID, Spec: specJSON}
	if err := s.markWarm(id); err != nil {
		return "", err
	}
	if err := s.pool.Clone(ctx, templateDataset(key.tenant, tmpl.ID), datasetName(id), pool.CloneOptions{}); err != nil {
		s.unmarkWarm(id)
		return "", err
	}
	fail := func(err error) (string, error) {
		s.destroyWarm(context.WithoutCancel(ctx), id)
		return "", err
	}
	if s.pool.Caps().Quota && sp.Limits.DiskBytes > 0 {
		if err := s.pool.SetQuota(ctx, datasetName(id), sp.Limits.DiskBytes); err != nil {
			return fail(err)
		}
	}
	rs, err := s.runtimeSpec(sb, tmpl)
	if err != nil {
		return fail(err)
	}
	s.withNetwork(&rs, sb, sp)
	if dir, err := s.openAgentSocket(id); err != nil {
		return fail(err)
	} else if dir != "" {
		rs.Mounts = append(rs.Mounts, steadrt.Mount{Source: dir, Destination: agentSocketDir, ReadOnly: true})
		rs.Env = append(rs.Env, "STEAD_API_SOCKET="+agentSocketDir+"/api.sock", "STEAD_TOKEN="+s.SandboxToken(id))
	}
	if err := s.rt.Start(ctx, rs); err != nil {
		return fail(err)
	}
	s.warmUp(ctx, id)
	s.log.Info("warm sandbox ready", "sandbox", id, "tenant", key.tenant, "template", key.template)
	return id, nil
}

// warmRefillDelay is how long after a take the pool starts making its
// replacement.
const warmRefillDelay = 100 * time.Millisecond

// warmUpCommand is what warmUp runs in a new warm sandbox.
var warmUpCommand = []string{"/bin/true"}

// warmUp runs one exec in a warm sandbox before it is offered. The first
// exec in a new sandbox costs several milliseconds more than the next
// (bench/RESULTS.md, "Warm pool": the guest's first fork and exec, the
// dynamic loader's first reads from the sandbox's own root), and a create
// from the pool should not pay for it. The command changes nothing in the
// sandbox; it runs as root with no environment, before the sandbox has a
// tenant. A failure (a template without /bin/true) only means the first
// exec of the create pays as a cold one does.
func (s *Service) warmUp(ctx context.Context, id string) {
	t0 := time.Now()
	res, err := s.rt.Exec(ctx, id, guest.ExecSpec{Args: warmUpCommand})
	if err != nil || res.ExitCode != 0 {
		s.log.Debug("warm sandbox: warm-up exec failed", "sandbox", id, "exit", res.ExitCode, "err", err)
		return
	}
	s.warm.warmedUp.Add(1)
	s.log.Debug("warm sandbox warmed up", "sandbox", id, "dur", time.Since(t0))
}

// destroyWarm removes a warm sandbox that has no record.
func (s *Service) destroyWarm(ctx context.Context, id string) {
	s.rt.Kill(ctx, id)
	s.closeAgentSocket(id)
	s.releaseNetwork(ctx, id)
	if err := s.pool.Delete(ctx, datasetName(id)); err != nil {
		s.log.Error("delete a warm sandbox", "sandbox", id, "err", err)
		return // marked still: the next daemon tries again
	}
	s.unmarkWarm(id)
}

// drainWarm destroys every warm sandbox held.
func (s *Service) drainWarm(ctx context.Context) {
	w := &s.warm
	w.mu.Lock()
	var ids []string
	for k, l := range w.ready {
		ids = append(ids, l...)
		delete(w.ready, k)
	}
	w.mu.Unlock()
	for _, id := range ids {
		s.destroyWarm(ctx, id)
	}
}

// dropWarmLeftovers removes the warm sandboxes an earlier daemon left:
// those marked in WarmDir that have no record. A marked id with a record
// was taken (the daemon died before it dropped the mark): only its mark
// goes; list is every record, deleted ones included (Reconcile's). Nothing
// unmarked is ever removed, so a lost or replaced metadata
// store never costs a sandbox its data. It runs before serving.
func (s *Service) dropWarmLeftovers(ctx context.Context, list []store.Sandbox) {
	dir := s.opts.WarmDir
	if dir == "" {
		return
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		s.log.Error("list warm sandbox marks", "dir", dir, "err", err)
		return
	}
	known := make(map[string]bool, len(list))
	for _, sb := range list {
		known[sb.ID] = true
	}
	for _, e := range ents {
		id := e.Name()
		if !strings.HasPrefix(id, "sb-") || !e.Type().IsRegular() {
			continue
		}
		if known[id] {
			s.unmarkWarm(id)
			continue
		}
		s.log.Warn("removing a warm sandbox of an earlier run", "sandbox", id)
		s.destroyWarm(ctx, id)
	}
}

// markWarm records durably that id is a warm sandbox, before its dataset
// exists (see Options.WarmDir).
func (s *Service) markWarm(id string) error {
	dir := s.opts.WarmDir
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("warm sandbox marks: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("mark warm sandbox %s: %w", id, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsutil.SyncDir(dir)
	}
	if err != nil {
		os.Remove(filepath.Join(dir, id))
		return fmt.Errorf("mark warm sandbox %s: %w", id, err)
	}
	return nil
}

// unmarkWarm drops id's mark (best effort: a mark left over is settled by
// the next daemon's dropWarmLeftovers).
func (s *Service) unmarkWarm(id string) {
	if s.opts.WarmDir == "" {
		return
	}
	if err := os.Remove(filepath.Join(s.opts.WarmDir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("drop a warm sandbox's mark", "sandbox", id, "err", err)
	}
}

// warmFits reports whether a create may be served from the pool: nothing
// it asks for has to be in place at boot.
func warmFits(req client.CreateSandboxRequest, sp spec) bool {
	w := warmSpec()
	if req.NoStart || req.DiskBytes > 0 || sp.Service != nil || len(sp.Volumes) > 0 ||
		sp.InstanceType != w.InstanceType || sp.Limits != w.Limits {
		return false
	}
	for _, r := range sp.SecretRefs {
		if r.File != "" {
			return false
		}
	}
	return true
}

// takeWarm gives a warm sandbox of tmpl the identity of a create (name ""
// names it by its id); ok is false when the pool has none (the caller
// creates one cold).
func (s *Service) takeWarm(ctx context.Context, tenant, name string, tmpl store.Template, sp spec) (sb client.Sandbox, ok bool, err error) {
	t0 := time.Now()
	w := &s.warm
	key := warmKey{tenant, tmpl.ID}
	w.mu.Lock()
	if len(w.ready[key]) == 0 {
		w.mu.Unlock()
		return client.Sandbox{}, false, nil
	}
	id := w.ready[key][0]
	w.ready[key] = w.ready[key][1:]
	w.mu.Unlock()
	if name == "" {
		name = id
	}
	giveBack := func() {
		w.mu.Lock()
		w.ready[key] = append([]string{id}, w.ready[key]...)
		w.mu.Unlock()
	}
	taken := false
	defer func() {
		if taken {
			// The replacement boots a little later: the taker's next
			// calls (its first exec) do not wait behind it for the CPU.
			time.AfterFunc(warmRefillDelay, s.wakeWarm)
			return
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}()
	if st, err := s.rt.Status(ctx, id); err != nil || st != steadrt.StatusRunning {
		// It died while waiting: drop it, create cold.
		s.log.Warn("warm sandbox found dead", "sandbox", id, "status", st, "err", err)
		s.destroyWarm(context.WithoutCancel(ctx), id)
		return client.Sandbox{}, false, nil
	}
	tStatus := time.Now()
	if err := s.tenantMayRun(ctx, tenant); err != nil {
		giveBack()
		return client.Sandbox{}, true, err
	}
	if err := s.budgetMayRun(ctx, tenant, id); err != nil {
		giveBack()
		return client.Sandbox{}, true, err
	}
	if err := s.checkSecretsSet(ctx, tenant, sp.SecretRefs); err != nil {
		giveBack()
		return client.Sandbox{}, true, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	releaseQuota, err := s.admitQuota(ctx, tenant, "create sandbox "+name, quotaUse{disk: sp.Limits.DiskBytes}.plus(runUse(sp.Limits)))
	if err != nil {
		giveBack()
		return client.Sandbox{}, true, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	defer releaseQuota()
	release, err := s.admitDisk(ctx, "disk quota of sandbox "+name, sp.Limits.DiskBytes, sp.Limits.DiskBytes)
	if err != nil {
		giveBack()
		return client.Sandbox{}, true, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	defer release()
	unlock := s.lock(id)
	defer unlock()
	ctx = context.WithoutCancel(ctx) // see transition
	tAdmit := time.Now()
	// The network policy first: the sandbox must never run under its
	// tenant with the default policy when it asked for another.
	if sp.Network != nil {
		if n := s.net(); n != nil {
			parsed, err := policy.Parse(*sp.Network)
			if err == nil {
				err = n.SetPolicy(ctx, id, parsed)
			}
			if err != nil {
				s.destroyWarm(ctx, id)
				return client.Sandbox{}, true, fmt.Errorf("create sandbox %s: network policy: %w", name, err)
			}
		}
	}
	tNet := time.Now()
	sp.Warm = true
	if err := s.sealEnv(id, &sp); err != nil {
		s.destroyWarm(ctx, id)
		return client.Sandbox{}, true, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	specJSON, _ := json.Marshal(sp)
	tSeal := time.Now()
	now := s.now()
	_, err = s.opts.Owner.Acquire(ctx, id)
	var rec store.Sandbox
	if err == nil {
		rec, err = s.st.CreateSandbox(ctx, store.Sandbox{
			ID: id, TenantID: tenant, Name: name, TemplateID: tmpl.ID, State: store.StateRunning,
			Spec: specJSON, CreatedAt: now, UpdatedAt: now, StartedAt: &now,
		})
		if err != nil {
			s.opts.Owner.Release(context.WithoutCancel(ctx), id)
		}
	}
	if err != nil {
		if sp.Network == nil {
			giveBack() // untouched
		} else {
			s.destroyWarm(ctx, id) // its policy is the caller's now
		}
		if errors.Is(err, errs.ErrConflict) {
			return client.Sandbox{}, true, fmt.Errorf("create sandbox %s: the name is taken (a deleted sandbox keeps its name until it is purged): %w", name, errs.ErrConflict)
		}
		return client.Sandbox{}, true, err
	}
	tStore := time.Now()
	taken = true
	s.unmarkWarm(id) // its record owns it now
	s.act.started(id, now)
	w.taken.Add(1)
	v := s.view(rec)
	// Where a take's time goes (bench/lifecycle reads this line).
	s.log.Debug("warm sandbox taken", "sandbox", id, "status", tStatus.Sub(t0), "admit", tAdmit.Sub(tStatus),
		"network", tNet.Sub(tAdmit), "seal", tSeal.Sub(tNet), "store", tStore.Sub(tSeal), "rest", time.Since(tStore), "dur", time.Since(t0))
	s.log.Info("sandbox created", "sandbox", id, "tenant", tenant, "warm", true)
	return v, true, nil
}

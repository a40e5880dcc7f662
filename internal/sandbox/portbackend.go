package sandbox

import (
	"context"
	"crypto/subtle"
	"fmt"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/portproxy"
	"github.com/stead-dev/stead/internal/store"
)

// PortBackend is the service as the port proxy sees it.
func (s *Service) PortBackend() portproxy.Backend { return portBackend{s} }

type portBackend struct{ s *Service }

var _ portproxy.Backend = portBackend{}

// Target implements portproxy.Backend. The id is a sandbox id (names are
// per tenant and a proxied request names no tenant).
func (b portBackend) Target(ctx context.Context, id string, port int) (portproxy.Target, error) {
	e, err := b.s.portCache.get(ctx, b.s, id)
	if err != nil {
		return portproxy.Target{}, err
	}
	t := portproxy.Target{SandboxID: id, Tenant: e.tenant, AutoResume: e.autoResume, State: e.state}
	for _, p := range e.ports {
		if p.Port == port {
			t.Exposed, t.Public = true, p.Public
		}
	}
	if n := b.s.net(); n != nil {
		t.Addr, _ = n.Addr(id)
	}
	return t, nil
}

// portEntry is what the port proxy needs of a sandbox, as last read.
type portEntry struct {
	at         time.Time
	tenant     string
	state      string
	autoResume bool
	ports      []portSpec
}

// portEntryTTL bounds how long a proxied request may act on a sandbox's
// record as read earlier; the service forgets an entry at once when it
// changes the sandbox itself.
const portEntryTTL = time.Second

// portEntries caches sandboxes' records for the port proxy, so a proxied
// request costs no store read.
type portEntries struct {
	mu sync.Mutex
	m  map[string]portEntry
}

func (c *portEntries) get(ctx context.Context, s *Service, id string) (portEntry, error) {
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && time.Since(e.at) < portEntryTTL {
		return e, nil
	}
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err != nil || sb.ID != id || sb.State == store.StateDeleted {
		return portEntry{}, fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return portEntry{}, err
	}
	e = portEntry{at: time.Now(), tenant: sb.TenantID, state: string(sb.State), autoResume: sp.AutoResume, ports: sp.Ports}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]portEntry{}
	}
	c.m[id] = e
	c.mu.Unlock()
	return e, nil
}

// forget drops a sandbox's entry (it changed).
func (c *portEntries) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// SandboxChanged tells the service's caches that a sandbox changed
// outside its own calls (the daemon hooks it to the lifecycle events).
func (s *Service) SandboxChanged(id string) { s.portCache.forget(id) }

// Authorize implements portproxy.Backend: the key must reach the sandbox
// (a key of its tenant whose role may use it and whose scope reaches it,
// or the sandbox's own token).
func (b portBackend) Authorize(ctx context.Context, key, id string) error {
	p, err := b.s.Authenticate(ctx, key)
	if err != nil {
		return err
	}
	if p.Sandbox != "" && p.Sandbox != id {
		return errs.ErrNotFound
	}
	if p.EffectiveRole() == client.RoleReadOnly {
		return errs.ErrForbidden // a port's app may change anything: not a read
	}
	sb, err := b.s.st.GetSandbox(ctx, p.TenantID, id)
	if err != nil || !p.Reaches(b.s.view(sb)) {
		return errs.ErrNotFound
	}
	return nil
}

// CheckToken implements portproxy.Backend.
func (b portBackend) CheckToken(id string, port int, token string) bool {
	if token == "" || len(b.s.opts.TokenKey) == 0 {
		return false
	}
	e, err := b.s.portCache.get(context.Background(), b.s, id)
	if err != nil {
		return false
	}
	for _, p := range e.ports {
		if p.Port == port && !p.Public {
			return subtle.ConstantTimeCompare([]byte(b.s.portToken(id, p)), []byte(token)) == 1
		}
	}
	return false
}

// Wake implements portproxy.Backend: a stopped (or archived) sandbox is
// started, a paused one resumed; one already running is left alone.
func (b portBackend) Wake(ctx context.Context, id string) error {
	defer b.s.portCache.forget(id)
	sb, err := b.s.st.GetSandbox(ctx, "", id)
	if err != nil {
		return err
	}
	_, err = b.s.StartSandbox(ctx, sb.TenantID, sb.ID)
	if isAlready(err) {
		return nil
	}
	if err == nil {
		b.s.record(ctx, sb.TenantID, "sandbox.wake", sb.ID, nil)
	}
	return err
}

// NoteActivity implements portproxy.Backend.
func (b portBackend) NoteActivity(id string) { b.s.NoteActivity(id, ActivityPort) }

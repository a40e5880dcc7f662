package sandbox

import (
	"context"
	"crypto/subtle"
	"fmt"

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
	sb, err := b.s.st.GetSandbox(ctx, "", id)
	if err != nil || sb.ID != id || sb.State == store.StateDeleted {
		return portproxy.Target{}, fmt.Errorf("sandbox %s: %w", id, errs.ErrNotFound)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return portproxy.Target{}, err
	}
	t := portproxy.Target{SandboxID: sb.ID, Tenant: sb.TenantID, AutoResume: sp.AutoResume, State: string(sb.State)}
	for _, p := range sp.Ports {
		if p.Port == port {
			t.Exposed, t.Public = true, p.Public
		}
	}
	if n := b.s.net(); n != nil {
		t.Addr, _ = n.Addr(sb.ID)
	}
	return t, nil
}

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
	sb, err := b.s.st.GetSandbox(context.Background(), "", id)
	if err != nil || sb.ID != id {
		return false
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return false
	}
	for _, p := range sp.Ports {
		if p.Port == port && !p.Public {
			return subtle.ConstantTimeCompare([]byte(b.s.portToken(id, p)), []byte(token)) == 1
		}
	}
	return false
}

// Wake implements portproxy.Backend: a stopped (or archived) sandbox is
// started, a paused one resumed; one already running is left alone.
func (b portBackend) Wake(ctx context.Context, id string) error {
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

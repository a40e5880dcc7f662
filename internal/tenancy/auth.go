package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// keyPrefix marks stead API keys so they are recognisable in logs and
// secret scanners.
const keyPrefix = "stead_"

func hashKey(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func newSecret() string {
	var b [24]byte
	rand.Read(b[:])
	return keyPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Authenticate resolves an API key or a sandbox token to its principal.
// An unknown, revoked or expired key is errs.ErrUnauthenticated; a key of
// a suspended tenant is errs.ErrForbidden, with a message that says so.
func (s *Service) Authenticate(ctx context.Context, secret string) (api.Principal, error) {
	var p api.Principal
	switch {
	case strings.HasPrefix(secret, sandboxKeyPrefix):
		var err error
		if p, err = s.authenticateSandboxToken(ctx, secret); err != nil {
			return api.Principal{}, err
		}
	case strings.HasPrefix(secret, keyPrefix):
		k, err := s.st.LookupAPIKey(ctx, hashKey(secret))
		if err != nil {
			if errors.Is(err, errs.ErrNotFound) {
				return api.Principal{}, errs.ErrUnauthenticated
			}
			return api.Principal{}, err
		}
		if k.ExpiresAt != nil && !s.now().Before(*k.ExpiresAt) {
			return api.Principal{}, fmt.Errorf("key %s expired at %s: %w", k.ID, k.ExpiresAt.Format(time.RFC3339), errs.ErrUnauthenticated)
		}
		p = api.Principal{TenantID: k.TenantID, KeyID: k.ID, Admin: k.Role == store.RoleAdmin, Role: k.Role,
			Sandboxes: k.Scope.Sandboxes, Labels: k.Scope.Labels}
	default:
		return api.Principal{}, errs.ErrUnauthenticated
	}
	t, err := s.st.GetTenant(ctx, p.TenantID)
	if err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return api.Principal{}, errs.ErrUnauthenticated // deleted with its tenant
		}
		return api.Principal{}, err
	}
	if t.State == store.TenantSuspended {
		return api.Principal{}, fmt.Errorf("tenant %s is suspended: its keys are refused until an admin runs `stead tenant unsuspend %s`: %w",
			t.ID, t.ID, errs.ErrForbidden)
	}
	return p, nil
}

// maxScopeSandboxes caps the sandboxes a key may be scoped to.
const maxScopeSandboxes = 100

// CreateAPIKey makes a key in p's tenant: of p's role or below, with an
// optional scope and expiry (see client.CreateAPIKeyRequest).
func (s *Service) CreateAPIKey(ctx context.Context, p api.Principal, req client.CreateAPIKeyRequest) (client.APIKey, error) {
	role := req.Role
	if req.Admin {
		if role != "" && role != client.RoleAdmin {
			return client.APIKey{}, fmt.Errorf("admin and role %s contradict each other: %w", role, errs.ErrInvalid)
		}
		role = client.RoleAdmin
	}
	if role == "" {
		role = client.RoleTenantUser
	}
	if !api.RoleAtMost(role, client.RoleAdmin) {
		return client.APIKey{}, fmt.Errorf("role %q: want one of %s: %w", role, strings.Join(client.Roles, ", "), errs.ErrInvalid)
	}
	if !p.AdministersTenant() {
		return client.APIKey{}, fmt.Errorf("creating API keys needs a tenant-admin or admin key: %w", errs.ErrForbidden)
	}
	if !api.RoleAtMost(role, p.EffectiveRole()) {
		return client.APIKey{}, fmt.Errorf("a %s key cannot create a %s key (a key makes keys of its role or below): %w", p.EffectiveRole(), role, errs.ErrForbidden)
	}
	scope := store.KeyScope{Sandboxes: req.Sandboxes, Labels: req.Labels}
	if err := checkScope(scope); err != nil {
		return client.APIKey{}, err
	}
	if role == client.RoleAdmin && !scope.IsZero() {
		return client.APIKey{}, fmt.Errorf("an admin key reaches every tenant: it cannot be scoped to sandboxes: %w", errs.ErrInvalid)
	}
	var expires *time.Time
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return client.APIKey{}, fmt.Errorf("expires_in %q: want a positive Go duration such as 720h: %w", req.ExpiresIn, errs.ErrInvalid)
		}
		t := s.now().Add(d)
		expires = &t
	}
	k, secret, err := s.storeKey(ctx, store.APIKey{TenantID: p.TenantID, Name: req.Name, Role: role, Scope: scope, ExpiresAt: expires}, newSecret())
	if err != nil {
		return client.APIKey{}, err
	}
	s.log.Info("api key created", "tenant", p.TenantID, "key", k.ID, "role", role, "by", p.KeyID)
	v := keyView(k)
	v.Secret = secret
	return v, nil
}

// checkScope refuses a malformed key scope: empty or over-long sandbox
// names, more than maxScopeSandboxes of them, invalid labels, or both
// kinds at once (a key is limited to named sandboxes or to a selector).
func checkScope(sc store.KeyScope) error {
	if len(sc.Sandboxes) > 0 && len(sc.Labels) > 0 {
		return fmt.Errorf("a key is scoped to named sandboxes or to labels, not both: %w", errs.ErrInvalid)
	}
	if len(sc.Sandboxes) > maxScopeSandboxes {
		return fmt.Errorf("a key may be scoped to at most %d sandboxes: %w", maxScopeSandboxes, errs.ErrInvalid)
	}
	for _, n := range sc.Sandboxes {
		if n == "" || len(n) > 128 || strings.ContainsAny(n, ", \t\n/") {
			return fmt.Errorf("sandbox %q in a key's scope: give a sandbox id or name: %w", n, errs.ErrInvalid)
		}
	}
	return CheckLabels(sc.Labels)
}

// ListAPIKeys lists p's tenant's keys, without secrets.
func (s *Service) ListAPIKeys(ctx context.Context, p api.Principal) ([]client.APIKey, error) {
	keys, err := s.st.ListAPIKeys(ctx, p.TenantID)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	out := make([]client.APIKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyView(k))
	}
	return out, nil
}

// manageableKey returns p's tenant's key id when p may manage it (its role
// is at most p's).
func (s *Service) manageableKey(ctx context.Context, p api.Principal, id string) (store.APIKey, error) {
	if !p.AdministersTenant() {
		return store.APIKey{}, fmt.Errorf("managing API keys needs a tenant-admin or admin key: %w", errs.ErrForbidden)
	}
	k, err := s.st.GetAPIKey(ctx, p.TenantID, id)
	if errors.Is(err, errs.ErrNotFound) {
		return k, fmt.Errorf("key %s: %w (stead key ls shows the keys)", id, errs.ErrNotFound)
	}
	if err != nil {
		return k, err
	}
	if !api.RoleAtMost(k.Role, p.EffectiveRole()) {
		return k, fmt.Errorf("key %s has role %s, above this key's %s: %w", id, k.Role, p.EffectiveRole(), errs.ErrForbidden)
	}
	return k, nil
}

// RotateAPIKey makes a successor of key id with a new secret and lets the
// old one expire after the overlap. The successor keeps the name, role,
// scope and any expiry of the old key. A key rotated already, or expired,
// is errs.ErrConflict (rotate its successor instead).
func (s *Service) RotateAPIKey(ctx context.Context, p api.Principal, id string, req client.RotateAPIKeyRequest) (client.APIKey, error) {
	overlap := client.DefaultKeyOverlap
	if req.Overlap != "" {
		d, err := time.ParseDuration(req.Overlap)
		if req.Overlap == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return client.APIKey{}, fmt.Errorf("overlap %q: want a Go duration such as 24h, or 0: %w", req.Overlap, errs.ErrInvalid)
		}
		overlap = d
	}
	old, err := s.manageableKey(ctx, p, id)
	if err != nil {
		return client.APIKey{}, err
	}
	now := s.now()
	switch {
	case old.RotatedTo != "":
		return client.APIKey{}, fmt.Errorf("key %s was rotated already, to %s: rotate that one: %w", id, old.RotatedTo, errs.ErrConflict)
	case old.ExpiresAt != nil && !now.Before(*old.ExpiresAt):
		return client.APIKey{}, fmt.Errorf("key %s has expired: create a new key: %w", id, errs.ErrConflict)
	}
	next, secret, err := s.storeKey(ctx, store.APIKey{TenantID: old.TenantID, Name: old.Name, Role: old.Role, Scope: old.Scope, ExpiresAt: old.ExpiresAt}, newSecret())
	if err != nil {
		return client.APIKey{}, err
	}
	end := now.Add(overlap)
	if old.ExpiresAt == nil || end.Before(*old.ExpiresAt) {
		old.ExpiresAt = &end
	}
	old.RotatedTo = next.ID
	if err := s.st.UpdateAPIKey(ctx, old); err != nil {
		// The successor works; the old key simply keeps working too.
		return client.APIKey{}, fmt.Errorf("rotate key %s: end the old secret: %w", id, err)
	}
	s.log.Info("api key rotated", "tenant", old.TenantID, "key", old.ID, "to", next.ID, "old_expires_at", *old.ExpiresAt, "by", p.KeyID)
	v := keyView(next)
	v.Secret = secret
	return v, nil
}

// RevokeAPIKey deletes key id: it stops working at once.
func (s *Service) RevokeAPIKey(ctx context.Context, p api.Principal, id string) error {
	k, err := s.manageableKey(ctx, p, id)
	if err != nil {
		return err
	}
	if err := s.st.DeleteAPIKey(ctx, k.TenantID, k.ID); err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	s.log.Info("api key revoked", "tenant", k.TenantID, "key", k.ID, "by", p.KeyID)
	return nil
}

// keyView is the API's view of a key (no secret).
func keyView(k store.APIKey) client.APIKey {
	return client.APIKey{ID: k.ID, Tenant: k.TenantID, Name: k.Name, Role: k.Role, Admin: k.Role == store.RoleAdmin,
		Sandboxes: k.Scope.Sandboxes, Labels: k.Scope.Labels, ExpiresAt: k.ExpiresAt, RotatedTo: k.RotatedTo, CreatedAt: k.CreatedAt}
}

// storeKey stores k (its id, hash and creation time made here) with the
// given secret and returns it with the secret.
func (s *Service) storeKey(ctx context.Context, k store.APIKey, secret string) (store.APIKey, string, error) {
	var b [5]byte
	rand.Read(b[:])
	k.ID = "key-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	k.Hash = hashKey(secret)
	k.CreatedAt = s.now()
	if err := s.st.CreateAPIKey(ctx, k); err != nil {
		return store.APIKey{}, "", fmt.Errorf("create API key: %w", err)
	}
	return k, secret, nil
}

// Bootstrap makes sure the default tenant exists and has an admin key. The
// first time, it calls keep with the new key's secret before storing the
// key's hash (so a crash in between leaves no admin key that nobody holds;
// the next start simply makes another) and returns the secret, to be shown
// once; later it returns "". keep may be nil.
func (s *Service) Bootstrap(ctx context.Context, keep func(secret string) error) (string, error) {
	if _, err := s.st.GetTenant(ctx, store.DefaultTenant); errors.Is(err, errs.ErrNotFound) {
		if err := s.st.CreateTenant(ctx, store.Tenant{ID: store.DefaultTenant, Name: "default", CreatedAt: s.now()}); err != nil && !errors.Is(err, errs.ErrConflict) {
			return "", fmt.Errorf("create default tenant: %w", err)
		}
	} else if err != nil {
		return "", fmt.Errorf("read default tenant: %w", err)
	}
	keys, err := s.st.ListAPIKeys(ctx, store.DefaultTenant)
	if err != nil {
		return "", fmt.Errorf("list API keys: %w", err)
	}
	for _, k := range keys {
		if k.Role == store.RoleAdmin && k.ExpiresAt == nil {
			return "", nil
		}
	}
	secret := newSecret()
	if keep != nil {
		if err := keep(secret); err != nil {
			return "", fmt.Errorf("keep bootstrap key: %w", err)
		}
	}
	if _, _, err := s.storeKey(ctx, store.APIKey{TenantID: store.DefaultTenant, Name: "bootstrap-admin", Role: store.RoleAdmin}, secret); err != nil {
		return "", err
	}
	return secret, nil
}

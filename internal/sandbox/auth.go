package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

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

// Authenticate resolves an API key.
func (s *Service) Authenticate(ctx context.Context, secret string) (api.Principal, error) {
	if strings.HasPrefix(secret, sandboxKeyPrefix) {
		return s.authenticateSandboxToken(ctx, secret)
	}
	if !strings.HasPrefix(secret, keyPrefix) {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	k, err := s.st.LookupAPIKey(ctx, hashKey(secret))
	if err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return api.Principal{}, errs.ErrUnauthenticated
		}
		return api.Principal{}, err
	}
	return api.Principal{TenantID: k.TenantID, KeyID: k.ID, Admin: k.Admin}, nil
}

// CreateAPIKey makes a key for the caller's tenant; only admins may.
func (s *Service) CreateAPIKey(ctx context.Context, p api.Principal, name string, admin bool) (client.APIKey, error) {
	if !p.Admin {
		return client.APIKey{}, fmt.Errorf("creating API keys needs an admin key: %w", errs.ErrForbidden)
	}
	return s.createKey(ctx, p.TenantID, name, admin)
}

func (s *Service) createKey(ctx context.Context, tenant, name string, admin bool) (client.APIKey, error) {
	return s.storeKey(ctx, tenant, name, admin, newSecret())
}

func (s *Service) storeKey(ctx context.Context, tenant, name string, admin bool, secret string) (client.APIKey, error) {
	var b [5]byte
	rand.Read(b[:])
	id := "key-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	k := store.APIKey{ID: id, TenantID: tenant, Name: name, Hash: hashKey(secret), Admin: admin, CreatedAt: s.now()}
	if err := s.st.CreateAPIKey(ctx, k); err != nil {
		return client.APIKey{}, fmt.Errorf("create API key: %w", err)
	}
	return client.APIKey{ID: id, Tenant: tenant, Name: name, Admin: admin, Secret: secret}, nil
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
		if k.Admin {
			return "", nil
		}
	}
	secret := newSecret()
	if keep != nil {
		if err := keep(secret); err != nil {
			return "", fmt.Errorf("keep bootstrap key: %w", err)
		}
	}
	k, err := s.storeKey(ctx, store.DefaultTenant, "bootstrap-admin", true, secret)
	if err != nil {
		return "", err
	}
	return k.Secret, nil
}

var (
	_ api.Backend           = (*Service)(nil)
	_ api.CheckpointBackend = (*Service)(nil)
	_ api.SnapshotBackend   = (*Service)(nil)
	_ api.VolumeBackend     = (*Service)(nil)
	_ api.AuditBackend      = (*Service)(nil)
	_ api.SessionBackend    = (*Service)(nil)
	_ api.OrientBackend     = (*Service)(nil)
	_ api.TaskBackend       = (*Service)(nil)
)

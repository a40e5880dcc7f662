package tenancy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Sandbox tokens. The agent inside a sandbox reaches its own state with a
// token that is an HMAC of the sandbox id under the cluster's token key:
// nothing to store, valid across restarts and on every node, useless for
// any other sandbox, and confined by the API to the sandbox's own state
// (api.Principal.Sandbox). internal/sandbox hands it to the sandbox
// (internal/sandbox/agentsock.go).

// sandboxKeyPrefix marks sandbox-scoped tokens.
const sandboxKeyPrefix = "stead_sbx_"

// SandboxToken returns the sandbox-scoped API token of sandbox id ("" when
// the service has no token key).
func (s *Service) SandboxToken(id string) string {
	if len(s.opts.TokenKey) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, s.opts.TokenKey)
	m.Write([]byte("sandbox-token\x00" + id))
	return sandboxKeyPrefix + id + "_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(m.Sum(nil)))
}

// authenticateSandboxToken resolves a sandbox-scoped token.
func (s *Service) authenticateSandboxToken(ctx context.Context, secret string) (api.Principal, error) {
	rest := strings.TrimPrefix(secret, sandboxKeyPrefix)
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 || len(s.opts.TokenKey) == 0 {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	id := rest[:i]
	if !hmac.Equal([]byte(s.SandboxToken(id)), []byte(secret)) {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	sb, err := s.st.GetSandbox(ctx, "", id)
	if err != nil || sb.ID != id || sb.State == store.StateDeleted {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: sb.TenantID, KeyID: "sandbox:" + id, Sandbox: id}, nil
}

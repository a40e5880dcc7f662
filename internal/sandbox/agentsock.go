package sandbox

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"path/filepath"
	"strings"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/fsutil"
	"github.com/stead-dev/stead/internal/store"
)

// The agent inside a sandbox reaches its own state through
// /run/stead/api.sock with the token in $STEAD_TOKEN (also in
// /run/stead/token). The token is an HMAC of the sandbox id under the
// daemon's token key: nothing to store, valid across restarts, useless for
// any other sandbox, and confined by the API to the sandbox's checkpoints,
// session log and orient (api.Principal.Sandbox).

const (
	agentSocketDir   = "/run/stead"
	sandboxKeyPrefix = "stead_sbx_"
)

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

// openAgentSocket serves the API for sandbox id and writes its token
// beside the socket; it returns the directory to mount ("" when the
// service has no agent sockets).
func (s *Service) openAgentSocket(id string) (string, error) {
	if s.opts.AgentSockets == nil {
		return "", nil
	}
	dir, err := s.opts.AgentSockets.Open(id)
	if err != nil {
		return "", err
	}
	if tok := s.SandboxToken(id); tok != "" {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, "token"), []byte(tok+"\n"), 0o644); err != nil {
			s.opts.AgentSockets.Close(id)
			return "", errors.Join(errors.New("write sandbox token"), err)
		}
	}
	return dir, nil
}

func (s *Service) closeAgentSocket(id string) {
	if s.opts.AgentSockets != nil {
		s.opts.AgentSockets.Close(id)
	}
}

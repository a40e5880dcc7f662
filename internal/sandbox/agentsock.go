package sandbox

import (
	"errors"
	"path/filepath"

	"github.com/stead-dev/stead/internal/fsutil"
)

// The agent inside a sandbox reaches its own state through
// /run/stead/api.sock with the token in $STEAD_TOKEN (also in
// /run/stead/token). The token is an HMAC of the sandbox id under the
// daemon's token key: nothing to store, valid across restarts, useless for
// any other sandbox, and confined by the API to the sandbox's checkpoints,
// session log and orient (api.Principal.Sandbox). It is made and checked
// by internal/tenancy (tokens.go; SandboxToken is promoted here through
// the embedded *tenancy.Service).

const agentSocketDir = "/run/stead"

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

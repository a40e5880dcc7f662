package daemon

import (
	"log/slog"
	"net/http"

	"github.com/stead-dev/stead/internal/e2b"
	"github.com/stead-dev/stead/internal/sandbox"
)

// E2BConfig configures the E2B-compatible API (docs/e2b.md) served on
// the API's listener.
type E2BConfig struct {
	// Disabled turns the E2B routes off.
	Disabled bool
	// BaseTemplate is the stead template E2B's "base" maps to ("": the
	// daemon's default).
	BaseTemplate string
	// OnTimeout is what an E2B timeout does when the create asks for no
	// auto-pause: "stop" (default) or "pause"; never a delete.
	OnTimeout string
	// Domain, when set, is reported to the SDKs and routes Host
	// 49983-<id>.<Domain> to the data plane.
	Domain string
}

// mountE2B puts the E2B API in front of the stead API handler. In a
// cluster (cl not nil) an E2B request for a sandbox another node owns (a
// control-plane route naming it, or its data plane) is forwarded to that
// node, where its envd processes and watchers live, and a create is
// placed as the stead API's are.
func mountE2B(cfg E2BConfig, svc *sandbox.Service, key []byte, log *slog.Logger, cl *clusterNode, next http.Handler) http.Handler {
	if cfg.Disabled {
		return next
	}
	tmpl := map[string]string{"base": cfg.BaseTemplate}
	h := e2b.New(e2b.Options{Backend: svc, Key: key, Templates: tmpl, OnTimeout: cfg.OnTimeout,
		Domain: cfg.Domain, Logger: log})
	if cl == nil {
		return h.Mount(next)
	}
	return cl.router.PlaceCreates(e2b.IsCreate)(cl.router.ForwardSandbox(h.SandboxOf)(h.Mount(next)))
}

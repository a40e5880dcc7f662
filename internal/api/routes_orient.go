package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// registerOrientRoutes adds GET /v1/sandboxes/{id}/orient when the backend
// serves it.
func (s *server) registerOrientRoutes(b Backend) {
	ob, ok := b.(OrientBackend)
	if !ok {
		return
	}
	o := s.agentOp(agentOwnSandbox, http.MethodGet, "/v1/sandboxes/{id}/orient", "orient",
		"What a resuming agent must read first", "sessions", http.StatusOK)
	o.Description = "One call for an agent that starts again: why and when the sandbox last stopped, " +
		"its latest checkpoint documents, the tails of its workspace notes (decisions.md and plan.md " +
		"unless `files` names others), the latest session run with every in-doubt tool intent (an " +
		"intent with no result: its side effect may or may not have happened) and the run's last " +
		"events. `text` renders it all, ready for a model's prompt."
	huma.Register(s.api, o, func(ctx context.Context, in *struct {
		SandboxRef
		Files  string `query:"files" doc:"Comma-separated sandbox paths whose tails to include"`
		Events int    `query:"events" minimum:"0" maximum:"200" default:"20" doc:"How many recent session events"`
	}) (*out[client.Orient], error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "orient", err)
		}
		var files []string
		for _, f := range strings.Split(in.Files, ",") {
			if f = strings.TrimSpace(f); f != "" {
				files = append(files, f)
			}
		}
		or, err := ob.Orient(ctx, p.TenantID, in.ID, files, in.Events)
		if err != nil {
			return nil, s.fail(ctx, "orient", err)
		}
		return &out[client.Orient]{Body: or}, nil
	})
}

package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// registerMisc adds the daemon info, API key and tenant routes.
func (s *server) registerMisc() {
	huma.Register(s.api, s.op(http.MethodGet, "/v1/info", "get-info",
		"Describe the daemon: version, pool, runtime, instance types, what persists", "daemon", 0),
		func(ctx context.Context, _ *struct{}) (*out[client.Info], error) {
			if _, err := principal(ctx); err != nil {
				return nil, s.fail(ctx, "get info", err)
			}
			info := s.b.Info(ctx)
			if info.Version == "" {
				info.Version = s.ver
			}
			return &out[client.Info]{Body: info}, nil
		})

	s.registerKeys()
	if tb, ok := s.b.(TenantBackend); ok {
		s.registerKeyManagement(tb)
		s.registerTenants(tb)
	}
}

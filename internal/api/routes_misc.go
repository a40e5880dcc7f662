package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// registerMisc adds the daemon info and API key routes.
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

	keyOp := s.op(http.MethodPost, "/v1/keys", "create-key",
		"Create an API key in the caller's tenant (admin keys only); the secret is shown once", "keys", http.StatusCreated)
	keyOp.Errors = append(keyOp.Errors, http.StatusForbidden)
	huma.Register(s.api, keyOp,
		func(ctx context.Context, in *struct{ Body client.CreateAPIKeyRequest }) (*out[client.APIKey], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "create key", err)
			}
			if !p.Admin {
				return nil, s.fail(ctx, "create key",
					fmt.Errorf("create key: only an admin key may create API keys (use the key in /var/lib/stead/admin.key): %w", errs.ErrForbidden))
			}
			key, err := s.b.CreateAPIKey(ctx, p, in.Body.Name, in.Body.Admin)
			if err != nil {
				return nil, s.fail(ctx, "create key", err)
			}
			return &out[client.APIKey]{Body: key}, nil
		})
}

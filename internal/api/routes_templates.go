package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// registerTemplates adds the /v1/templates routes.
func (s *server) registerTemplates() {
	const tag = "templates"

	huma.Register(s.api, s.op(http.MethodGet, "/v1/templates", "list-templates", "List templates", tag, 0),
		func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.Template]], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "list templates", err)
			}
			list, err := s.b.ListTemplates(ctx, p.TenantID)
			if err != nil {
				return nil, s.fail(ctx, "list templates", err)
			}
			if list == nil {
				list = []client.Template{}
			}
			return pageOf(list, in.PageQuery)
		})

	imp := s.op(http.MethodPost, "/v1/templates", "import-template",
		"Import an OCI image (registry, oci-layout or docker-archive) as a template", tag, http.StatusCreated)
	imp.Errors = append(imp.Errors, http.StatusConflict, http.StatusInsufficientStorage)
	huma.Register(s.api, imp,
		func(ctx context.Context, in *struct{ Body client.ImportTemplateRequest }) (*out[client.Template], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "import template", err)
			}
			t, err := s.b.ImportTemplate(ctx, p.TenantID, in.Body)
			if err != nil {
				return nil, s.fail(ctx, "import template", err)
			}
			return &out[client.Template]{Body: t}, nil
		})

	del := s.op(http.MethodDelete, "/v1/templates/{id}", "delete-template",
		"Delete a template no sandbox uses", tag, http.StatusNoContent)
	del.Errors = append(del.Errors, http.StatusConflict)
	huma.Register(s.api, del,
		func(ctx context.Context, in *struct {
			ID string `path:"id" minLength:"1" maxLength:"128" doc:"Template id"`
		}) (*struct{}, error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "delete template", err)
			}
			if err := s.b.DeleteTemplate(ctx, p.TenantID, in.ID); err != nil {
				return nil, s.fail(ctx, "delete template", err)
			}
			return nil, nil
		})
}

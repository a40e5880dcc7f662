package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// SecretName is the {name} path parameter of the /v1/secrets/{name}
// routes (exported only because huma ignores unexported embedded fields).
type SecretName struct {
	Name string `path:"name" minLength:"1" maxLength:"128" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Secret name (an environment variable name)"`
}

// secretIntro opens the description of every secret route.
const secretIntro = "A secret is a named value a tenant keeps in the daemon (an API key, a token) for its sandboxes: " +
	"a sandbox created with secrets: [NAME] gets it in its service's and every exec's environment, and with " +
	"secret_files: [NAME=/run/secrets/FILE] as a file on a tmpfs. The value is stored encrypted, is never " +
	"returned by the API, and never reaches a sandbox's disk, its snapshots or its pushes (they keep the name only). "

// registerSecrets adds the /v1/secrets routes; s.op keeps them closed to
// sandbox-scoped tokens.
func (s *server) registerSecrets(b SecretBackend) {
	const tag = "secrets"

	set := s.op(http.MethodPut, "/v1/secrets/{name}", "set-secret", "Set a secret (create or rotate)", tag, 0)
	set.Description = secretIntro + "Creates the secret or replaces its value. A rotation reaches a running " +
		"sandbox's execs at once (each exec reads the current value) and its service and secret files at its next " +
		"start. The answer carries the name and times, never the value."
	huma.Register(s.api, set, func(ctx context.Context, in *struct {
		SecretName
		Body client.SetSecretRequest
	}) (*out[client.Secret], error) {
		const op = "set secret"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		sec, err := b.SetSecret(ctx, p.TenantID, in.Name, in.Body.Value)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Secret]{Body: sec}, nil
	})

	list := s.op(http.MethodGet, "/v1/secrets", "list-secrets", "List the tenant's secrets (names, never values)", tag, 0)
	list.Description = secretIntro + "Lists names, creation and last-set times, and the sandboxes that reference each."
	huma.Register(s.api, list, func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.Secret]], error) {
		const op = "list secrets"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		list, err := b.ListSecrets(ctx, p.TenantID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if list == nil {
			list = []client.Secret{}
		}
		return pageOf(list, in.PageQuery)
	})

	del := s.op(http.MethodDelete, "/v1/secrets/{name}", "delete-secret", "Delete a secret", tag, http.StatusNoContent)
	del.Description = secretIntro + "Refused with 409, naming them, while any sandbox references the secret " +
		"(soft-deleted sandboxes included: undelete would bring the reference back); purge those sandboxes first."
	del.Errors = append(del.Errors, http.StatusConflict)
	huma.Register(s.api, del, func(ctx context.Context, in *SecretName) (*struct{}, error) {
		const op = "delete secret"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := b.DeleteSecret(ctx, p.TenantID, in.Name); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return nil, nil
	})
}

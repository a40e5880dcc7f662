package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// KeyRef is the {key} path parameter of the key routes.
type KeyRef struct {
	Key string `path:"key" minLength:"1" maxLength:"64" doc:"API key id (key-...)"`
}

// TenantRef is the {tenant} path parameter of the tenant routes.
type TenantRef struct {
	Tenant string `path:"tenant" minLength:"1" maxLength:"64" doc:"Tenant id"`
}

// keysIntro is the description shared by the key routes.
const keysIntro = "Keys belong to a tenant: the caller's, or for an admin key the one named by the X-Stead-Tenant header. " +
	"Roles: admin (everything, every tenant), tenant-admin (everything in its tenant, its keys included), " +
	"tenant-user (sandboxes and volumes, no keys), read-only (GET only). A key makes and manages keys of its role or below. "

// registerKeys adds POST /v1/keys.
func (s *server) registerKeys() {
	keyOp := s.op(http.MethodPost, "/v1/keys", "create-key",
		"Create an API key in the caller's tenant; the secret is shown once", "keys", http.StatusCreated)
	keyOp.Description = keysIntro + "A scoped key (sandboxes, or labels) reaches only those sandboxes; " +
		"its creates get its labels. The secret is stored hashed and shown only in this answer."
	huma.Register(s.api, keyOp,
		func(ctx context.Context, in *struct{ Body client.CreateAPIKeyRequest }) (*out[client.APIKey], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "create key", err)
			}
			key, err := s.b.CreateAPIKey(ctx, p, in.Body)
			if err != nil {
				return nil, s.fail(ctx, "create key", err)
			}
			return &out[client.APIKey]{Body: key}, nil
		})
}

// registerKeyManagement adds the list, rotate and revoke key routes.
func (s *server) registerKeyManagement(b TenantBackend) {
	const tag = "keys"
	list := s.op(http.MethodGet, "/v1/keys", "list-keys", "List the tenant's API keys (no secrets)", tag, 0)
	list.Description = keysIntro
	huma.Register(s.api, list, func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.APIKey]], error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "list keys", err)
		}
		keys, err := b.ListAPIKeys(ctx, p)
		if err != nil {
			return nil, s.fail(ctx, "list keys", err)
		}
		if keys == nil {
			keys = []client.APIKey{}
		}
		return pageOf(keys, in.PageQuery)
	})

	rotate := s.op(http.MethodPost, "/v1/keys/{key}/rotate", "rotate-key",
		"Rotate a key: a new secret (shown once) under a new key id; the old one works for the overlap, then expires", tag, http.StatusCreated)
	rotate.Description = keysIntro + "The new key keeps the old one's name, role and scope. The overlap defaults to 24h; 0 ends the old secret now."
	huma.Register(s.api, rotate, func(ctx context.Context, in *struct {
		KeyRef
		Body *client.RotateAPIKeyRequest
	}) (*out[client.APIKey], error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "rotate key", err)
		}
		var req client.RotateAPIKeyRequest
		if in.Body != nil {
			req = *in.Body
		}
		k, err := b.RotateAPIKey(ctx, p, in.Key, req)
		if err != nil {
			return nil, s.fail(ctx, "rotate key", err)
		}
		return &out[client.APIKey]{Body: k}, nil
	})

	revoke := s.op(http.MethodDelete, "/v1/keys/{key}", "revoke-key", "Revoke a key: it stops working at once", tag, http.StatusNoContent)
	huma.Register(s.api, revoke, func(ctx context.Context, in *KeyRef) (*struct{}, error) {
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, "revoke key", err)
		}
		if err := b.RevokeAPIKey(ctx, p, in.Key); err != nil {
			return nil, s.fail(ctx, "revoke key", err)
		}
		return nil, nil
	})
}

// registerTenants adds the /v1/tenants routes (admin keys only, see
// authz.go).
func (s *server) registerTenants(b TenantBackend) {
	const tag = "tenants"
	create := s.op(http.MethodPost, "/v1/tenants", "create-tenant", "Create a tenant (admin keys only)", tag, http.StatusCreated)
	create.Errors = append(create.Errors, http.StatusConflict)
	create.Description = "A tenant owns sandboxes, volumes, templates and keys, and sees nothing of another tenant's. " +
		"Make its first key with POST /v1/keys and the header X-Stead-Tenant: <tenant>."
	huma.Register(s.api, create, func(ctx context.Context, in *struct{ Body client.CreateTenantRequest }) (*out[client.Tenant], error) {
		t, err := b.CreateTenant(ctx, in.Body)
		if err != nil {
			return nil, s.fail(ctx, "create tenant", err)
		}
		return &out[client.Tenant]{Body: t}, nil
	})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/tenants", "list-tenants", "List tenants (admin keys only)", tag, 0),
		func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.Tenant]], error) {
			list, err := b.ListTenants(ctx)
			if err != nil {
				return nil, s.fail(ctx, "list tenants", err)
			}
			if list == nil {
				list = []client.Tenant{}
			}
			return pageOf(list, in.PageQuery)
		})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/tenants/{tenant}", "get-tenant", "Describe a tenant (admin keys only)", tag, 0),
		func(ctx context.Context, in *TenantRef) (*out[client.Tenant], error) {
			t, err := b.GetTenant(ctx, in.Tenant)
			if err != nil {
				return nil, s.fail(ctx, "get tenant", err)
			}
			return &out[client.Tenant]{Body: t}, nil
		})

	for _, a := range []struct {
		verb, summary string
		fn            func(context.Context, string) (client.Tenant, error)
	}{
		{"suspend", "Suspend a tenant: its keys get 403 and its running sandboxes are stopped (admin keys only)", b.SuspendTenant},
		{"unsuspend", "Lift a tenant's suspension: its keys work again; its sandboxes stay stopped (admin keys only)", b.UnsuspendTenant},
	} {
		fn, name := a.fn, a.verb+" tenant"
		huma.Register(s.api, s.op(http.MethodPost, "/v1/tenants/{tenant}/"+a.verb, a.verb+"-tenant", a.summary, tag, 0),
			func(ctx context.Context, in *TenantRef) (*out[client.Tenant], error) {
				t, err := fn(ctx, in.Tenant)
				if err != nil {
					return nil, s.fail(ctx, name, err)
				}
				return &out[client.Tenant]{Body: t}, nil
			})
	}

	del := s.op(http.MethodDelete, "/v1/tenants/{tenant}", "delete-tenant",
		"Delete a tenant with everything it owns; its pushed data becomes unreadable (admin keys only)", tag, 0)
	del.Description = "Purges the tenant's sandboxes, volumes, snapshots and templates, revokes its keys and destroys " +
		"its repository data keys (cryptographic erasure: what it pushed can no longer be decrypted, by anyone). " +
		"Recorded in the audit trail. The default tenant cannot be deleted. This cannot be undone."
	huma.Register(s.api, del, func(ctx context.Context, in *TenantRef) (*out[client.TenantDeletion], error) {
		d, err := b.DeleteTenant(ctx, in.Tenant)
		if err != nil {
			return nil, s.fail(ctx, "delete tenant", err)
		}
		return &out[client.TenantDeletion]{Body: d}, nil
	})
}

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// TenantActions stop (a tenant's suspension) or purge (its deletion) one
// sandbox of a tenant. The sandbox service implements them for the
// sandboxes this node serves; RelayTenant sends the others' to their
// owners. A sandbox already stopped, or already gone, is no error.
type TenantActions interface {
	TenantStop(ctx context.Context, tenant, id string) error
	TenantPurge(ctx context.Context, tenant, id string) error
}

// tenantPath is the node route of a tenant action on sandbox id; verb is
// stop or purge.
func tenantPath(id, verb string) string {
	return "/internal/v1/sandboxes/" + url.PathEscape(id) + "/tenant/" + verb
}

// tenantCall is the body of a tenant node call.
type tenantCall struct {
	Tenant string `json:"tenant"`
}

// RelayTenant returns the actions of a tenant's suspension or deletion on
// any node: an action on a sandbox this node serves (Route's zero Peer: it
// holds the lease, the sandbox never had one, or its owner is dead or
// unregistered) is done by local; one on a sandbox another live node owns
// is sent to that node by a signed node call (the node-call secret is all
// it needs: the admin's call that started the suspension is not at hand,
// and the owner acts through its own service, HandleTenant).
func (r *Router) RelayTenant(local TenantActions) TenantActions {
	return tenantRelay{r: r, local: local}
}

type tenantRelay struct {
	r     *Router
	local TenantActions
}

func (t tenantRelay) TenantStop(ctx context.Context, tenant, id string) error {
	return t.do(ctx, tenant, id, "stop", t.local.TenantStop)
}

func (t tenantRelay) TenantPurge(ctx context.Context, tenant, id string) error {
	return t.do(ctx, tenant, id, "purge", t.local.TenantPurge)
}

func (t tenantRelay) do(ctx context.Context, tenant, id, verb string, local func(context.Context, string, string) error) error {
	to, err := t.r.Route(ctx, tenant, id)
	if err != nil {
		return err
	}
	if to.Here() {
		return local(ctx, tenant, id)
	}
	body, err := json.Marshal(tenantCall{Tenant: tenant})
	if err != nil {
		return err
	}
	res, err := t.r.client.Do(ctx, to.Address, http.MethodPost, tenantPath(id, verb), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s sandbox %s on node %s: %w", verb, id, to.Node, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		var p problemDoc
		_ = json.Unmarshal(raw, &p)
		if p.Detail == "" {
			p.Detail = strings.TrimSpace(string(raw))
		}
		err := fmt.Errorf("%s sandbox %s on node %s: %s (HTTP %d)", verb, id, to.Node, p.Detail, res.StatusCode)
		if res.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", err, errs.ErrNotFound)
		}
		return err
	}
	t.r.o.Logger.DebugContext(ctx, "tenant action relayed", "verb", verb, "sandbox", id, "tenant", tenant, "node", to.Node)
	return nil
}

// HandleTenant serves, on mux, the node calls RelayTenant makes: a
// tenant's stop or purge of a sandbox, done by local (this node's
// service). mux must be served only to signed node calls
// (NodeAuth.RequireNode).
func HandleTenant(mux *http.ServeMux, local TenantActions) {
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/tenant/{verb}", func(w http.ResponseWriter, r *http.Request) {
		var c tenantCall
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil || c.Tenant == "" {
			WriteProblem(w, http.StatusBadRequest, "tenant action: the body must name the tenant")
			return
		}
		var act func(context.Context, string, string) error
		switch r.PathValue("verb") {
		case "stop":
			act = local.TenantStop
		case "purge":
			act = local.TenantPurge
		default:
			WriteProblem(w, http.StatusNotFound, fmt.Sprintf("tenant action %q: want stop or purge", r.PathValue("verb")))
			return
		}
		if err := act(r.Context(), c.Tenant, r.PathValue("id")); err != nil {
			WriteProblem(w, api.HTTPStatus(err), errs.Message(err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}\n"))
	})
}

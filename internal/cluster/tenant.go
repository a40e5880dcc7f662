package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
//
// TenantPurgeLocal deletes, once a tenant's records are gone, the datasets
// of it that a node's pool still holds (see TenantLocal): the sandbox
// service deletes this node's; RelayTenant's does this node's and sends
// the call to every other live node.
type TenantActions interface {
	TenantStop(ctx context.Context, tenant, id string) error
	TenantPurge(ctx context.Context, tenant, id string) error
	TenantPurgeLocal(ctx context.Context, p TenantLocal) error
}

// TenantLocal names what a deleted tenant may have left in a node's pool
// after its records were purged by another node: the datasets of its
// volumes and local snapshots (by id), the kept lost copies of its
// sandboxes (by sandbox id), and its template datasets (found by the
// tenant's prefix, TemplateDataset). The node deleting the tenant lists
// the ids before it purges the records.
type TenantLocal struct {
	Tenant    string   `json:"tenant"`
	Sandboxes []string `json:"sandboxes,omitempty"`
	Volumes   []string `json:"volumes,omitempty"`
	Snapshots []string `json:"snapshots,omitempty"`
}

// tenantLocalPath is the node route of a deleted tenant's local purge.
func tenantLocalPath(tenant string) string {
	return "/internal/v1/tenants/" + url.PathEscape(tenant) + "/purge-local"
}

// maxTenantLocalBody bounds the body of a local purge call (the ids of
// every sandbox, volume and snapshot of a tenant: about 30 bytes each).
const maxTenantLocalBody = 64 << 20

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

// TenantPurgeLocal deletes this node's datasets of the deleted tenant
// (local), then sends the call to every other live node, each of which
// deletes its own. A node that is dead now deletes them when it starts
// again (its Reconcile). The error joins each node's failure, naming it;
// the others still ran.
func (t tenantRelay) TenantPurgeLocal(ctx context.Context, p TenantLocal) error {
	var errList []error
	if err := t.local.TenantPurgeLocal(ctx, p); err != nil {
		errList = append(errList, fmt.Errorf("node %s: %w", t.r.o.Node, err))
	}
	nodes, err := t.r.o.Store.ListNodes(ctx)
	if err != nil {
		return errors.Join(append(errList, fmt.Errorf("purge the local data of tenant %s on the other nodes: list nodes: %w", p.Tenant, err))...)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return errors.Join(append(errList, err)...)
	}
	now := t.r.o.Clock()
	for _, n := range nodes {
		if n.Name == t.r.o.Node {
			continue
		}
		if age := now.Sub(n.HeartbeatAt); age > t.r.o.Grace {
			t.r.o.Logger.InfoContext(ctx, "deleted tenant: a dead node deletes its datasets of it when it starts again", "tenant", p.Tenant, "node", n.Name, "heartbeat_age", age)
			continue
		}
		if err := t.call(ctx, n.Address, tenantLocalPath(p.Tenant), body); err != nil {
			errList = append(errList, fmt.Errorf("node %s: %w", n.Name, err))
			continue
		}
		t.r.o.Logger.DebugContext(ctx, "deleted tenant's local purge sent", "tenant", p.Tenant, "node", n.Name)
	}
	if len(errList) > 0 {
		return fmt.Errorf("purge the local data of deleted tenant %s: %w", p.Tenant, errors.Join(errList...))
	}
	return nil
}

// call posts body to path on the node at address, signed, and turns a
// refusal into an error carrying its detail (a 404 wraps errs.ErrNotFound).
func (t tenantRelay) call(ctx context.Context, address, path string, body []byte) error {
	res, err := t.r.client.Do(ctx, address, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 == 2 {
		return nil
	}
	var p problemDoc
	_ = json.Unmarshal(raw, &p)
	if p.Detail == "" {
		p.Detail = strings.TrimSpace(string(raw))
	}
	err = fmt.Errorf("%s (HTTP %d)", p.Detail, res.StatusCode)
	if res.StatusCode == http.StatusNotFound {
		err = fmt.Errorf("%w: %w", err, errs.ErrNotFound)
	}
	return err
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
	if err := t.call(ctx, to.Address, tenantPath(id, verb), body); err != nil {
		return fmt.Errorf("%s sandbox %s on node %s: %w", verb, id, to.Node, err)
	}
	t.r.o.Logger.DebugContext(ctx, "tenant action relayed", "verb", verb, "sandbox", id, "tenant", tenant, "node", to.Node)
	return nil
}

// HandleTenant serves, on mux, the node calls RelayTenant makes: a
// tenant's stop or purge of a sandbox, and a deleted tenant's local purge
// (POST /internal/v1/tenants/{tenant}/purge-local, a TenantLocal body),
// done by local (this node's service). mux must be served only to signed
// node calls (NodeAuth.RequireNode).
func HandleTenant(mux *http.ServeMux, local TenantActions) {
	mux.HandleFunc("POST /internal/v1/tenants/{tenant}/purge-local", func(w http.ResponseWriter, r *http.Request) {
		var p TenantLocal
		if err := json.NewDecoder(io.LimitReader(r.Body, maxTenantLocalBody)).Decode(&p); err != nil || p.Tenant == "" || p.Tenant != r.PathValue("tenant") {
			WriteProblem(w, http.StatusBadRequest, "tenant local purge: the body must name the tenant of the path")
			return
		}
		if err := local.TenantPurgeLocal(r.Context(), p); err != nil {
			WriteProblem(w, api.HTTPStatus(err), errs.Message(err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}\n"))
	})
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

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

// BudgetActions pauses or stops a tenant's running sandbox for a budget
// (budget.Sandboxes; the sandbox service implements it). acted is false,
// with no error, when there was nothing to do.
type BudgetActions interface {
	BudgetPause(ctx context.Context, tenant, id string) (acted bool, err error)
	BudgetStop(ctx context.Context, tenant, id string) (acted bool, err error)
}

// budgetPath is the node route of a budget action on sandbox id; verb is
// pause or stop.
func budgetPath(id, verb string) string {
	return "/internal/v1/sandboxes/" + url.PathEscape(id) + "/budget/" + verb
}

// budgetCall is the body of a budget node call, and budgetAnswer its answer.
type budgetCall struct {
	Tenant string `json:"tenant"`
}

type budgetAnswer struct {
	Acted bool `json:"acted"`
}

// RelayBudget returns the budget actions of a cluster's budget checks,
// which run on one node (BudgetJobKey): an action on a sandbox this node
// serves (Route's zero Peer: it holds the lease, or the owner is dead) is
// done by local; one on another node's sandbox is sent, by a signed node
// call, to that node, which does it through its own service (HandleBudget).
func (r *Router) RelayBudget(local BudgetActions) BudgetActions {
	return budgetRelay{r: r, local: local}
}

type budgetRelay struct {
	r     *Router
	local BudgetActions
}

func (b budgetRelay) BudgetPause(ctx context.Context, tenant, id string) (bool, error) {
	return b.do(ctx, tenant, id, "pause", b.local.BudgetPause)
}

func (b budgetRelay) BudgetStop(ctx context.Context, tenant, id string) (bool, error) {
	return b.do(ctx, tenant, id, "stop", b.local.BudgetStop)
}

func (b budgetRelay) do(ctx context.Context, tenant, id, verb string, local func(context.Context, string, string) (bool, error)) (bool, error) {
	to, err := b.r.Route(ctx, tenant, id)
	if err != nil {
		return false, err
	}
	if to.Here() {
		return local(ctx, tenant, id)
	}
	body, err := json.Marshal(budgetCall{Tenant: tenant})
	if err != nil {
		return false, err
	}
	res, err := b.r.client.Do(ctx, to.Address, http.MethodPost, budgetPath(id, verb), bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("budget %s of sandbox %s on node %s: %w", verb, id, to.Node, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		var p problemDoc
		_ = json.Unmarshal(raw, &p)
		if p.Detail == "" {
			p.Detail = strings.TrimSpace(string(raw))
		}
		return false, fmt.Errorf("budget %s of sandbox %s on node %s: %s (HTTP %d)", verb, id, to.Node, p.Detail, res.StatusCode)
	}
	var a budgetAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return false, fmt.Errorf("budget %s of sandbox %s on node %s: decode the answer: %w", verb, id, to.Node, err)
	}
	return a.Acted, nil
}

// HandleBudget serves, on mux, the node calls RelayBudget makes: a budget
// action done by local (this node's service, which acts only on the
// sandboxes it holds). mux must be served only to signed node calls
// (NodeAuth.RequireNode).
func HandleBudget(mux *http.ServeMux, local BudgetActions) {
	mux.HandleFunc("POST /internal/v1/sandboxes/{id}/budget/{verb}", func(w http.ResponseWriter, r *http.Request) {
		var c budgetCall
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil || c.Tenant == "" {
			WriteProblem(w, http.StatusBadRequest, "budget action: the body must name the tenant")
			return
		}
		act := local.BudgetStop
		switch r.PathValue("verb") {
		case "pause":
			act = local.BudgetPause
		case "stop":
		default:
			WriteProblem(w, http.StatusNotFound, fmt.Sprintf("budget action %q: want pause or stop", r.PathValue("verb")))
			return
		}
		acted, err := act(r.Context(), c.Tenant, r.PathValue("id"))
		if err != nil {
			WriteProblem(w, api.HTTPStatus(err), errs.Message(err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(budgetAnswer{Acted: acted})
	})
}

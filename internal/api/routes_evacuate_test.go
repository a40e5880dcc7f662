package api

import (
	"context"
	"slices"
	"testing"

	"github.com/stead-dev/stead/client"
)

// EvacuateNode makes the options fake an EvacuateBackend, so the route
// walk of authz_test.go covers POST /v1/nodes/{name}/evacuate (admin keys
// only) and the OpenAPI checks see its descriptions.
func (f optionsFake) EvacuateNode(_ context.Context, p Principal, node string, req client.EvacuateRequest) (client.Operation, error) {
	f.record("EvacuateNode", p.TenantID, node)
	return client.Operation{ID: "op-1", Kind: "evacuate", Target: node, State: client.OperationSucceeded}, f.Err
}

func TestEvacuateRouteIsRegisteredForANodeBackendThatEvacuates(t *testing.T) {
	_, all := authzServers(t)
	if !slices.Contains(all, "POST /v1/nodes/{name}/evacuate") {
		t.Fatalf("no evacuate route among %d routes", len(all))
	}
}

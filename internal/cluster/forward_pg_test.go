package cluster

import (
	"net/http"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres"
	"github.com/stead-dev/stead/internal/store/postgres/pgtest"
)

// TestRoutingAndPlacementOnPostgreSQL runs two nodes on a real PostgreSQL
// store (a private server; STEAD_TEST_POSTGRES names an existing one): a
// call through node-a for node-b's sandbox is answered by node-b, and a
// create through node-a, cordoned, lands on node-b.
func TestRoutingAndPlacementOnPostgreSQL(t *testing.T) {
	srv := pgtest.Start(t)
	st, err := postgres.Open(t.Context(), srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := newNode(t, st, "node-a", roomy)
	b := newNode(t, st, "node-b", roomy)
	addSandbox(t, st, "sb-1", "one", "node-b")
	ctx := testCtx(t)
	sb, err := a.client(t).GetSandbox(ctx, "one")
	if err != nil || sb.Labels["served-by"] != "node-b" {
		t.Fatalf("get via node-a: %+v, %v; want it served by node-b", sb, err)
	}
	if _, err := st.SetNodeState(ctx, "node-a", store.NodeCordoned); err != nil {
		t.Fatal(err)
	}
	sb, err = a.client(t).CreateSandbox(ctx, client.CreateSandboxRequest{Name: "new"})
	if err != nil || sb.Labels["served-by"] != "node-b" {
		t.Fatalf("create via node-a: %+v, %v; want it on node-b", sb, err)
	}
	if len(a.b.Calls()) != 0 {
		t.Fatalf("node-a served %v", a.b.Calls())
	}
	res := rawCall(t, b, http.MethodGet, "/v1/sandboxes/one", func(r *http.Request) { newAuth(t, "node-a", otherSecret, time.Now()).Sign(r) })
	wantProblem(t, res, http.StatusUnauthorized, "bad signature")
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// lostFake serves the node routes with kept copies on node-2.
type lostFake struct {
	nodeFake
	recovered client.RecoverLostCopyRequest
	discarded []string
}

var _ api.LostCopyBackend = (*lostFake)(nil)

var fakeCopy = client.LostCopy{Node: "node-2", Copy: "lost-4-sb-abc", Sandbox: "sb-abc", SandboxName: "agent", Tenant: "t1",
	Epoch: 4, KeptAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), SizeBytes: 3 << 20}

func (f *lostFake) ListLostCopies(_ context.Context, node string) ([]client.LostCopy, error) {
	switch node {
	case "", "node-2":
		return []client.LostCopy{fakeCopy}, nil
	case "node-1":
		return []client.LostCopy{}, nil
	}
	return nil, fmt.Errorf("node %s is not registered: %w", node, errs.ErrNotFound)
}

func (f *lostFake) RecoverLostCopy(_ context.Context, node, copy string, req client.RecoverLostCopyRequest) (client.Sandbox, error) {
	if node != "node-2" || copy != fakeCopy.Copy {
		return client.Sandbox{}, fmt.Errorf("lost copy %s is not on node %s: %w", copy, node, errs.ErrNotFound)
	}
	f.recovered = req
	return client.Sandbox{ID: "sb-new", Name: req.Name, Tenant: "t1", State: "stopped"}, nil
}

func (f *lostFake) DiscardLostCopy(_ context.Context, node, copy string) error {
	if node != "node-2" || copy != fakeCopy.Copy {
		return fmt.Errorf("lost copy %s is not on node %s: %w", copy, node, errs.ErrNotFound)
	}
	f.discarded = append(f.discarded, copy)
	return nil
}

// tenantKeyBackend takes "k" as an admin key and "user" as a tenant
// user's.
type tenantKeyBackend struct{ nodeCLIBackend }

func (b tenantKeyBackend) Authenticate(ctx context.Context, secret string) (api.Principal, error) {
	if secret == "user" {
		return api.Principal{TenantID: "t1", Role: client.RoleTenantAdmin}, nil
	}
	return b.nodeCLIBackend.Authenticate(ctx, secret)
}

func TestNodeLostListsRecoversAndDiscardsKeptCopies(t *testing.T) {
	b := &backupBackend{cliBackend: &cliBackend{}, reqs: map[string]any{}, ops: map[string]client.Operation{}}
	lf := &lostFake{nodeFake: nodeFake{b}}
	srv := httptest.NewServer(api.NewHandler(tenantKeyBackend{nodeCLIBackend{b}}, api.Options{Logger: slog.New(slog.DiscardHandler), Nodes: lf}))
	t.Cleanup(srv.Close)

	out, _ := mustStead(t, srv, "node", "lost", "ls")
	for _, want := range []string{"NODE", "node-2", "lost-4-sb-abc", "sb-abc", "agent", "t1", "3.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls: %q lacks %q", out, want)
		}
	}
	if out, _ := mustStead(t, srv, "node", "lost", "ls", "--node", "node-1"); strings.Contains(out, "lost-4") {
		t.Errorf("ls --node node-1: %q", out)
	}
	if code, _, _ := stead(t, srv, "node", "lost", "ls", "--node", "nope"); code != exitNotFound {
		t.Errorf("ls of an unknown node: exit %d", code)
	}
	out, _ = mustStead(t, srv, "node", "lost", "recover", "node-2", "lost-4-sb-abc", "--name", "salvage")
	if !strings.Contains(out, "sb-new salvage") || lf.recovered.Name != "salvage" {
		t.Errorf("recover: %q %+v", out, lf.recovered)
	}
	if code, _, _ := stead(t, srv, "node", "lost", "recover", "node-2", "lost-9-sb-x"); code != exitNotFound {
		t.Errorf("recover of an absent copy: exit %d", code)
	}
	out, _ = mustStead(t, srv, "node", "lost", "discard", "node-2", "lost-4-sb-abc")
	if !strings.Contains(out, "discarded lost-4-sb-abc") || len(lf.discarded) != 1 {
		t.Errorf("discard: %q %v", out, lf.discarded)
	}

	// A tenant's key is refused every one of them, and nothing happens.
	for _, a := range [][]string{{"node", "lost", "ls"}, {"node", "lost", "ls", "--node", "node-2"},
		{"node", "lost", "recover", "node-2", "lost-4-sb-abc"}, {"node", "lost", "discard", "node-2", "lost-4-sb-abc"}} {
		var stdout, stderr bytes.Buffer
		code := runIO(append([]string{"--endpoint", srv.URL, "--api-key", "user"}, a...), strings.NewReader(""), &stdout, &stderr)
		if code == exitOK || !strings.Contains(stderr.String(), "admin key") {
			t.Errorf("%v with a tenant key: exit %d, %q", a, code, stderr.String())
		}
	}
	if len(lf.discarded) != 1 || lf.recovered.Name != "salvage" {
		t.Errorf("a tenant key changed something: %v %+v", lf.discarded, lf.recovered)
	}
}

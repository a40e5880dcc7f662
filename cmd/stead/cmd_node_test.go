package main

import (
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

// nodeFake serves the node routes, evacuate included, over the backup
// fake's operations.
type nodeFake struct{ *backupBackend }

var _ api.EvacuateBackend = nodeFake{}

// nodeCLIBackend is the backup fake with an admin key (the node routes
// need one).
type nodeCLIBackend struct{ *backupBackend }

func (nodeCLIBackend) Authenticate(_ context.Context, secret string) (api.Principal, error) {
	if secret != "k" {
		return api.Principal{}, errs.ErrUnauthenticated
	}
	return api.Principal{TenantID: "t1", Admin: true}, nil
}

func (f nodeFake) ListNodes(context.Context) ([]client.Node, error) { return nil, nil }

func (f nodeFake) GetNode(_ context.Context, name string) (client.Node, error) {
	return client.Node{Name: name}, nil
}

func (f nodeFake) SetNodeState(_ context.Context, name, state string) (client.Node, error) {
	return client.Node{Name: name, State: state}, nil
}

func (f nodeFake) EvacuateNode(_ context.Context, _ api.Principal, node string, req client.EvacuateRequest) (client.Operation, error) {
	if node == "nope" {
		return client.Operation{}, fmt.Errorf("evacuate node %s: it is not registered: %w", node, errs.ErrNotFound)
	}
	res := client.EvacuateResult{Node: node, Moved: []client.EvacuatedSandbox{{Sandbox: "sb-1", Target: "node-3", Push: "3f9a1c2b5d6e7f80aa", PauseSeconds: 2.5}}}
	if node == "doomed" {
		res.Failed = []client.EvacuatedSandbox{{Sandbox: "sb-2", Target: "node-3", Error: "push failed"}}
	}
	return f.start("evacuate", "evacuate", node, req, res)
}

func TestNodeEvacuateFollowsTheOperationAndPrintsWhereEachSandboxWent(t *testing.T) {
	b := &backupBackend{cliBackend: &cliBackend{}, reqs: map[string]any{}, ops: map[string]client.Operation{}}
	nf := nodeFake{b}
	srv := httptest.NewServer(api.NewHandler(nodeCLIBackend{b}, api.Options{Logger: slog.New(slog.DiscardHandler), Nodes: nf}))
	t.Cleanup(srv.Close)

	out, errOut := mustStead(t, srv, "node", "evacuate", "node-2")
	if !strings.Contains(out, "sb-1") || !strings.Contains(out, "moved") || !strings.Contains(out, "node-3") ||
		!strings.Contains(out, "2.5s") || !strings.Contains(out, "3f9a1c2b") {
		t.Errorf("stdout %q", out)
	}
	if !strings.Contains(errOut, "1 sandboxes moved, 0 stayed") {
		t.Errorf("stderr %q", errOut)
	}
	out, errOut = mustStead(t, srv, "node", "evacuate", "node-2", "--no-wait")
	if !strings.HasPrefix(out, "op-") || !strings.Contains(errOut, "--wait") {
		t.Errorf("--no-wait: %q %q", out, errOut)
	}
	// A failed evacuation exits 1 with the operation's error.
	if code, _, errOut := stead(t, srv, "node", "evacuate", "doomed"); code != exitError || !strings.Contains(errOut, "disk on fire") {
		t.Errorf("failed evacuation: exit %d, %q", code, errOut)
	}
	if code, _, _ := stead(t, srv, "node", "evacuate", "nope"); code != exitNotFound {
		t.Errorf("unknown node: exit %d, want %d", code, exitNotFound)
	}
}

func TestCreateFailoverFlagIsSentAndInfoShowsTheLastPush(t *testing.T) {
	srv, b := newNetworkServer(t)
	for _, a := range [][]string{{"create", "plain"}, {"create", "kept", "--failover", "none"}} {
		if code, _, errOut := stead(t, srv, a...); code != exitOK {
			t.Fatalf("%q: exit %d: %s", a, code, errOut)
		}
	}
	b.mu.Lock()
	created := b.created
	b.mu.Unlock()
	if len(created) != 2 || created[0].Failover != "" || created[1].Failover != client.FailoverNone {
		t.Fatalf("created %+v", created)
	}
	pushed := time.Now().Add(-3 * time.Minute)
	for _, c := range []struct {
		sb   client.Sandbox
		want string
	}{
		{client.Sandbox{Failover: client.FailoverRestore}, "restore, but never pushed"},
		{client.Sandbox{Failover: client.FailoverRestore, LastPushAt: &pushed}, "restore from the last push, 3 minutes ago"},
		{client.Sandbox{Failover: client.FailoverNone, LastPushAt: &pushed}, "none"},
	} {
		if got := failoverStr(c.sb); !strings.HasPrefix(got, c.want) {
			t.Errorf("failoverStr(%+v) = %q, want %q...", c.sb, got, c.want)
		}
	}
}

package sandbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/store"
)

func TestOrientTellsAResumingAgentWhereItStands(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	p := api.Principal{TenantID: tn, KeyID: "k1"}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "resumer", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	s.testWrite(t, sb.ID, "/workspace/decisions.md", "- use sqlite\n- never force-push\n")
	if _, err := s.PutCheckpoint(ctx, p, sb.ID, api.CheckpointWrite{Name: "plan", Body: []byte(`{"step":4}`)}); err != nil {
		t.Fatal(err)
	}
	th, err := s.CreateThread(ctx, p, sb.ID, client.CreateThreadRequest{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.StartRun(ctx, p, sb.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.AppendRunEvents(ctx, p, sb.ID, run.ID, []client.AppendEvent{
		{Type: "checkpoint", Payload: json.RawMessage(`{"plan":4}`)},
		{Type: "tool_intent", Payload: json.RawMessage(`{"tool":"send_email","to":"boss"}`)},
		{Type: "tool_intent", Payload: json.RawMessage(`{"tool":"git_push"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRunEvents(ctx, p, sb.ID, run.ID, []client.AppendEvent{{Type: "tool_result", Intent: evs[2].Seq, Payload: json.RawMessage(`{"ok":true}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTask(ctx, p, sb.ID, client.CreateTaskRequest{ID: "write-tests", Payload: json.RawMessage(`{"what":"cover rollback"}`)}); err != nil {
		t.Fatal(err)
	}
	or, err := s.Orient(ctx, tn, sb.ID, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(or.Checkpoints) != 1 || or.Run == nil || len(or.Run.InDoubt) != 1 || len(or.RecentEvents) != 4 || len(or.Files) != 1 {
		t.Fatalf("orient: %+v", or)
	}
	for _, want := range []string{"plan: version 1", "write-tests [open]", "IN DOUBT", "send_email", "never force-push", "reason: created"} {
		if !strings.Contains(or.Text, want) {
			t.Fatalf("orient text lacks %q:\n%s", want, or.Text)
		}
	}
	if strings.Contains(or.Text, "intent 3") {
		t.Fatalf("an answered intent is listed as in doubt:\n%s", or.Text)
	}
	if _, err := s.Orient(ctx, "other", sb.ID, nil, 10); err == nil {
		t.Fatal("another tenant oriented")
	}
}

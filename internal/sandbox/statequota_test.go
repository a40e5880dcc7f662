package sandbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/tenancy"
)

// TestStateQuotaRefusesWritesPastItAndChangesNothing: with state_bytes
// set, checkpoint puts, key-value puts, tasks, observations and session
// appends are admitted until the tenant's state would pass the limit; the
// write that would is refused with the quota named and stores nothing; the
// usage shows in the tenant's quotas; freeing state makes room again once
// the count is read anew; another tenant is not limited.
func TestStateQuotaRefusesWritesPastItAndChangesNothing(t *testing.T) {
	r := newQuotaRig(t, client.SetQuotasRequest{StateBytes: qi(400)})
	s := r.s
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	s.opts.Now = func() time.Time { return now }
	ctx := context.Background()
	p := api.Principal{TenantID: "acme", KeyID: "k1"}
	sb, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "keeper", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	doc := func(n int) []byte { return []byte(`"` + strings.Repeat("x", n-2) + `"`) }
	if _, err := s.PutCheckpoint(ctx, p, sb.ID, api.CheckpointWrite{Name: "plan", Body: doc(100)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutKV(ctx, p, sb.ID, "notes", doc(100), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTask(ctx, p, sb.ID, client.CreateTaskRequest{ID: "t1", Payload: json.RawMessage(doc(50))}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendObservation(ctx, p, sb.ID, client.AppendObservationRequest{Kind: "k", Payload: json.RawMessage(doc(50))}); err != nil {
		t.Fatal(err)
	}
	// 300 of 400 bytes used: a 150-byte version is refused, and the
	// document keeps its one version.
	_, err = s.PutCheckpoint(ctx, p, sb.ID, api.CheckpointWrite{Name: "plan", Body: doc(150)})
	r.refused(t, "a checkpoint past the state quota", err, client.QuotaStateBytes, 400, 300, 150)
	if cp, err := s.GetCheckpoint(ctx, p.TenantID, sb.ID, "", "plan", 0); err != nil || cp.Version != 1 {
		t.Fatalf("the refused put changed the document: %+v %v", cp, err)
	}
	th, err := s.CreateThread(ctx, p, sb.ID, client.CreateThreadRequest{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.StartRun(ctx, p, sb.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.AppendRunEvents(ctx, p, sb.ID, run.ID, []client.AppendEvent{{Type: client.EventNote, Payload: json.RawMessage(doc(120))}})
	r.refused(t, "a session append past the state quota", err, client.QuotaStateBytes, 400, 300, 120)
	_, err = s.PutKV(ctx, p, sb.ID, "more", doc(101), nil)
	r.refused(t, "a key past the state quota", err, client.QuotaStateBytes, 400, 300, 101)
	if _, err := s.GetKV(ctx, p.TenantID, sb.ID, "more"); err == nil {
		t.Fatal("the refused key was stored")
	}
	q, err := s.TenantQuotas(ctx, "acme")
	if err != nil || q.Usage.StateBytes != 300 || q.Limits.StateBytes != 400 {
		t.Fatalf("quotas: %+v %v, want 300 of 400 state bytes", q, err)
	}

	// Freeing state makes room once the count is read again.
	if err := s.DeleteKV(ctx, p, sb.ID, "notes", nil); err != nil {
		t.Fatal(err)
	}
	now = now.Add(tenancy.StateQuotaTTL)
	if _, err := s.AppendRunEvents(ctx, p, sb.ID, run.ID, []client.AppendEvent{{Type: client.EventNote, Payload: json.RawMessage(doc(120))}}); err != nil {
		t.Fatalf("an append after freeing 100 bytes: %v", err)
	}

	// The default tenant has no state quota.
	d := api.Principal{TenantID: "default", KeyID: "k2"}
	other, err := s.CreateSandbox(ctx, "default", client.CreateSandboxRequest{Name: "free", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutCheckpoint(ctx, d, other.ID, api.CheckpointWrite{Name: "plan", Body: doc(1000)}); err != nil {
		t.Fatalf("another tenant limited: %v", err)
	}
}

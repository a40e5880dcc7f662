package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestAuditTrailRecordsActionsAndDetectsTampering: lifecycle actions through
// the API land in the hash-chained trail, which survives the sandbox's
// purge; an edit of a stored entry is found by verify after a restart.
func TestAuditTrailRecordsActionsAndDetectsTampering(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "audited"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	entries, err := d.c.ListAudit(ctx, client.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.Action] = true
	}
	for _, want := range []string{"POST /v1/sandboxes", "POST /v1/sandboxes/{id}/stop", "DELETE /v1/sandboxes/{id}"} {
		if !seen[want] {
			t.Fatalf("action %q not in the audit trail (purged sandbox's history must stay): %+v", want, entries)
		}
	}
	rep, err := d.c.VerifyAudit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("verify of an intact trail: %+v %v", rep, err)
	}
	if _, err := d.c.CheckpointAudit(ctx); err != nil {
		t.Fatal(err)
	}
	d.stopGracefully()
	// Someone with disk access rewrites what happened.
	db := filepath.Join(d.dataDir, "stead.db")
	out, err := exec.Command("sqlite3", db, "UPDATE audit_entries SET outcome = '500' WHERE action = 'POST /v1/sandboxes/{id}/stop';").CombinedOutput()
	if err != nil {
		t.Fatalf("tamper: %v %s", err, out)
	}
	d.start()
	rep, err = d.c.VerifyAudit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.BadSeq == 0 {
		t.Fatalf("an edited entry was not detected: %+v", rep)
	}
}

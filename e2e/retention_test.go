package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// putRaw sends PUT path with body as key and returns the status and the
// problem detail.
func putRaw(t *testing.T, d *daemon, key, path, body string) rawAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+d.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Detail string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return rawAnswer{resp.StatusCode, p.Detail}
}

// TestTenantRetentionThroughTheCLI: an admin sets a tenant's retention
// with stead tenant retention and reads it back (the daemon's own
// defaults filled in); the tenant's key reads its effective policy and
// cannot set it; bad values (negative, unknown unit, a purge of 0) are a
// clear 400 naming the field and change nothing; an unknown tenant is 404.
func TestTenantRetentionThroughTheCLI(t *testing.T) {
	d := newDaemon(t, "--retention-warn-before", "2h")
	ctx := ctxT(t)
	if code, _, errOut := d.cli("tenant", "create", "acme"); code != 0 {
		t.Fatalf("tenant create: %d %s", code, errOut)
	}
	show := func() client.TenantRetention {
		t.Helper()
		code, out, errOut := d.cli("--json", "tenant", "retention", "acme")
		var r client.TenantRetention
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("retention show: %d %q %s", code, out, errOut)
		}
		return r
	}
	def := show()
	if def.Set != (client.RetentionPolicy{}) || def.UpdatedAt != nil ||
		def.Effective != (client.RetentionPolicy{ArchiveStoppedAfter: "7d", DeleteArchivedAfter: "0", PurgeDeletedAfter: "30d", WarnBefore: "2h",
			SessionKeepWithin: "0", ObservationsKeepWithin: "0"}) {
		t.Fatalf("a new tenant's retention: %+v", def)
	}
	code, out, errOut := d.cli("tenant", "retention", "acme", "--archive-after", "14d", "--delete-archived-after", "90d", "--purge-after", "30d", "--warn-before", "3d",
		"--session-keep-within", "30d", "--observations-keep-within", "60d")
	if code != 0 || !strings.Contains(out, "90d") || !strings.Contains(out, "(set)") {
		t.Fatalf("retention set: %d %q %s", code, out, errOut)
	}
	want := client.RetentionPolicy{ArchiveStoppedAfter: "14d", DeleteArchivedAfter: "90d", PurgeDeletedAfter: "30d", WarnBefore: "3d",
		SessionKeepWithin: "30d", ObservationsKeepWithin: "60d"}
	set := show()
	if set.Set != want || set.Effective != want || set.UpdatedAt == nil {
		t.Fatalf("read back: %+v", set)
	}
	code, _, _ = d.cli("tenant", "retention", "acme", "--warn-before", "36h")
	if r := show(); code != 0 || r.Set.WarnBefore != "1d12h" || r.Set.PurgeDeletedAfter != "30d" {
		t.Fatalf("one flag changed: %d %+v", code, r)
	}
	want.WarnBefore = "1d12h"

	for _, bad := range []struct{ flag, value, says string }{
		{"--purge-after", "-1d", "purge_deleted_after"},
		{"--warn-before", "5w", "warn_before"},
		{"--archive-after", "1h2d", "archive_stopped_after"},
		{"--purge-after", "0", "purge_deleted_after 0"},
		{"--delete-archived-after", "99999d", "delete_archived_after"},
	} {
		code, _, errOut := d.cli("tenant", "retention", "acme", bad.flag+"="+bad.value)
		if code != 1 || !strings.Contains(errOut, bad.says) {
			t.Errorf("%s=%s: exit %d %q, want 1 and an error naming %s", bad.flag, bad.value, code, errOut, bad.says)
		}
		if r := show(); r.Set != want {
			t.Fatalf("%s=%s changed the policy: %+v", bad.flag, bad.value, r.Set)
		}
	}
	for _, body := range []string{`{"warn_before":"-3d"}`, `{"purge_deleted_after":"3 days"}`, `{"archive_stopped_after":"14"}`} {
		if a := putRaw(t, d, d.key, "/v1/tenants/acme/retention", body); a.status != http.StatusBadRequest || a.detail == "" {
			t.Errorf("PUT %s: %+v, want 400 with a reason", body, a)
		}
		if r := show(); r.Set != want {
			t.Fatalf("PUT %s changed the policy: %+v", body, r.Set)
		}
	}
	if code, _, _ := d.cli("tenant", "retention", "nobody", "--warn-before", "1d"); code != 3 {
		t.Fatalf("unknown tenant: exit %d, want 3", code)
	}

	// The tenant's own key reads its effective policy, and sets nothing.
	k, err := d.c.WithTenant("acme").CreateKey(ctx, client.CreateAPIKeyRequest{Name: "ops", Role: client.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	acme := keyClient(t, d, k.Secret)
	if r, err := acme.GetRetention(ctx); err != nil || r.Tenant != "acme" || r.Effective != want {
		t.Fatalf("acme's own retention: %+v %v", r, err)
	}
	if _, err := acme.SetTenantRetention(ctx, "acme", client.RetentionPolicy{PurgeDeletedAfter: "1d"}); !client.IsForbidden(err) {
		t.Fatalf("a tenant-admin sets its retention: %v, want 403", err)
	}
	if r, err := d.c.GetRetention(ctx); err != nil || r.Tenant != "default" || r.Effective.WarnBefore != "2h" {
		t.Fatalf("the default tenant's retention: %+v %v", r, err)
	}
}

// TestRetentionWarnsThenPurgesOnARealDaemon: with purge_deleted_after 20s
// and warn_before 10s (policies every second), a soft-deleted sandbox
// gets its retention.warning event and log line while it still exists,
// and is purged no earlier than 20s after its deletion, with
// retention.purge in the audit trail.
func TestRetentionWarnsThenPurgesOnARealDaemon(t *testing.T) {
	d := newDaemon(t, "--policy-interval", "1s")
	ctx := ctxT(t)
	if _, err := d.c.SetTenantRetention(ctx, "default", client.RetentionPolicy{PurgeDeletedAfter: "20s", WarnBefore: "10s"}); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "brief", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	del, err := d.c.DeleteSandbox(ctx, sb.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	deletedAt := *del.DeletedAt
	if !del.PurgeAt.Equal(deletedAt.Add(20 * time.Second)) {
		t.Fatalf("purge_at %v, want deleted_at + 20s", del.PurgeAt)
	}
	var warned *client.DaemonEvent
	deadline := time.Now().Add(90 * time.Second)
	for warned == nil && time.Now().Before(deadline) {
		page, err := d.c.ListDaemonEvents(ctx, client.EventQuery{Types: []string{"retention."}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			if e.Data["subject_id"] == sb.ID {
				e := e
				warned = &e
			}
		}
		if warned == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if warned == nil {
		t.Fatalf("no retention.warning; log:\n%s", d.logText())
	}
	if warned.Type != "retention.warning" || warned.Data["action"] != "purge" || warned.Time.Before(deletedAt.Add(10*time.Second)) {
		t.Fatalf("warning %+v (deleted at %v)", warned, deletedAt)
	}
	// The warning comes before the purge: the sandbox is still there unless
	// the purge is already due.
	if _, err := d.c.GetSandbox(ctx, sb.ID); err != nil && time.Since(deletedAt) < 20*time.Second {
		t.Fatalf("gone before its purge was due: %v", err)
	}
	if !strings.Contains(d.logText(), "retention: automatic deletion ahead") {
		t.Fatal("no log line of the warning")
	}
	for {
		_, err := d.c.GetSandbox(ctx, sb.ID)
		if client.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not purged: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The purge's own entry follows the record's removal: it may not be
	// in the trail yet at the moment the sandbox is gone.
	var pre, post int
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		entries, err := d.c.ListAudit(ctx, client.AuditQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		pre, post = 0, 0
		for i, e := range entries {
			if e.Target != sb.ID {
				continue
			}
			switch e.Action {
			case "retention.purge":
				pre = i + 1
				if !strings.Contains(e.Outcome, "due ") || !strings.Contains(e.Outcome, "warned ") || e.Time.Before(deletedAt.Add(20*time.Second)) {
					t.Fatalf("retention.purge entry %+v", e)
				}
			case "sandbox.purge_expired":
				post = i + 1
			}
		}
		if post != 0 || time.Now().After(wait) {
			break
		}
	}
	if pre == 0 || post <= pre {
		t.Fatalf("audit: retention.purge at %d, sandbox.purge_expired at %d; want the first before the second", pre, post)
	}
}

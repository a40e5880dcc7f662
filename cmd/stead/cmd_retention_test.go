package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// retentionCLIBackend answers as an admin key and keeps each tenant's
// policy as the last PUT left it.
type retentionCLIBackend struct {
	*cliBackend
	mu   sync.Mutex
	sets []client.RetentionPolicy
	cur  client.RetentionPolicy
}

var _ api.RetentionBackend = (*retentionCLIBackend)(nil)

func (b *retentionCLIBackend) Authenticate(context.Context, string) (api.Principal, error) {
	return api.Principal{TenantID: "default", KeyID: "key-admin", Admin: true, Role: client.RoleAdmin}, nil
}

func (b *retentionCLIBackend) GetRetention(_ context.Context, tenant string) (client.TenantRetention, error) {
	if tenant != "acme" {
		return client.TenantRetention{}, fmt.Errorf("tenant %s: %w", tenant, errs.ErrNotFound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	eff := client.RetentionPolicy{ArchiveStoppedAfter: "7d", DeleteArchivedAfter: "0", PurgeDeletedAfter: "30d", WarnBefore: "3d"}
	if b.cur.PurgeDeletedAfter != "" {
		eff.PurgeDeletedAfter = b.cur.PurgeDeletedAfter
	}
	if b.cur.WarnBefore != "" {
		eff.WarnBefore = b.cur.WarnBefore
	}
	return client.TenantRetention{Tenant: tenant, Set: b.cur, Effective: eff}, nil
}

func (b *retentionCLIBackend) SetRetention(ctx context.Context, tenant string, p client.RetentionPolicy) (client.TenantRetention, error) {
	b.mu.Lock()
	b.sets = append(b.sets, p)
	b.cur = p
	b.mu.Unlock()
	return b.GetRetention(ctx, tenant)
}

// TestTenantRetentionShowsAndChangesOnlyTheGivenFlags: without flags the
// verb only reads; each flag changes its field and keeps the others;
// "default" unsets a field; an unknown tenant exits 3.
func TestTenantRetentionShowsAndChangesOnlyTheGivenFlags(t *testing.T) {
	b := &retentionCLIBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	out, _ := mustStead(t, srv, "tenant", "retention", "acme")
	for _, want := range []string{"purge deleted after:", "30d", "(daemon default)", "delete archived after:", "never"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if len(b.sets) != 0 {
		t.Fatalf("showing set %+v", b.sets)
	}
	mustStead(t, srv, "tenant", "retention", "acme", "--purge-after", "2d", "--warn-before", "1d")
	out, _ = mustStead(t, srv, "tenant", "retention", "acme", "--archive-after", "14d")
	if got := b.sets[len(b.sets)-1]; got != (client.RetentionPolicy{ArchiveStoppedAfter: "14d", PurgeDeletedAfter: "2d", WarnBefore: "1d"}) {
		t.Fatalf("second set sent %+v, want the earlier fields kept", got)
	}
	if !strings.Contains(out, "2d") || !strings.Contains(out, "(set)") {
		t.Fatalf("set printed:\n%s", out)
	}
	mustStead(t, srv, "tenant", "retention", "acme", "--warn-before", "default")
	if got := b.sets[len(b.sets)-1]; got.WarnBefore != "" || got.PurgeDeletedAfter != "2d" {
		t.Fatalf("default sent %+v", got)
	}
	out, _ = mustStead(t, srv, "--json", "tenant", "retention", "acme")
	var r client.TenantRetention
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Set.PurgeDeletedAfter != "2d" || r.Effective.WarnBefore != "3d" {
		t.Fatalf("--json: %v %q", err, out)
	}
	if code, _, _ := stead(t, srv, "tenant", "retention", "nobody"); code != exitNotFound {
		t.Fatalf("unknown tenant: exit %d, want %d", code, exitNotFound)
	}
	if code, _, _ := stead(t, srv, "tenant", "retention"); code != exitUsage {
		t.Fatalf("no tenant: exit %d, want %d", code, exitUsage)
	}
}

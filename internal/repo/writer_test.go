package repo_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/repo"
)

// TestLatestPrefersTheHigherEpochOverTheNewerTime: a node that lost a
// sandbox's lease pushes after the new owner did (a newer time, a lower
// epoch). Latest, the listing's order and retention all take the new
// owner's manifest as the newest; the writer is read back from the
// manifest, and a manifest without one reads as the zero Writer (older
// than any with an epoch).
func TestLatestPrefersTheHigherEpochOverTheNewerTime(t *testing.T) {
	r, _, _ := newRepo(t)
	ctx := context.Background()
	sc, err := r.Scope(ctx, "t-acme", true)
	must(t, err)
	src := t.TempDir()
	push := func(content string, w repo.Writer) *repo.Manifest {
		t.Helper()
		must(t, os.WriteFile(filepath.Join(src, "f"), []byte(content), 0o644))
		m, _, err := sc.Push(ctx, src, repo.PushOptions{Source: "sandbox/sb-1", Writer: w})
		must(t, err)
		time.Sleep(5 * time.Millisecond) // distinct manifest times
		return m
	}
	old := push("before any writer was recorded", repo.Writer{})
	owner := push("the new owner's push", repo.Writer{Node: "node-b", Epoch: 2})
	stale := push("the old owner's push, after the failover", repo.Writer{Node: "node-a", Epoch: 1})
	if !stale.Time.After(owner.Time) {
		t.Fatalf("the stale manifest is not newer in time: %s vs %s", stale.Time, owner.Time)
	}

	latest, err := sc.Latest(ctx, "sandbox/sb-1")
	must(t, err)
	if latest.ID != owner.ID {
		t.Fatalf("latest is %s (writer %+v), want the new owner's %s", latest.ID, latest.Writer, owner.ID)
	}
	if latest.Writer != (repo.Writer{Node: "node-b", Epoch: 2}) {
		t.Fatalf("writer read back as %+v", latest.Writer)
	}
	if m, err := sc.Manifest(ctx, old.ID); err != nil || m.Writer != (repo.Writer{}) {
		t.Fatalf("a manifest without a writer: %+v, %v", m, err)
	}

	all, err := sc.Snapshots(ctx)
	must(t, err)
	var order []string
	for _, m := range all {
		if m.Source == "sandbox/sb-1" {
			order = append(order, m.ID.String())
		}
	}
	want := []string{old.ID.String(), stale.ID.String(), owner.ID.String()}
	if len(order) != len(want) || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("listing order of sb-1 %v, want %v (no writer, stale, owner)", order, want)
	}

	keep, drop := repo.Policy{KeepLast: 1}.Apply(all, time.Now())
	kept := map[string]bool{}
	for _, m := range keep {
		kept[m.ID.String()] = true
	}
	if !kept[owner.ID.String()] || kept[stale.ID.String()] || len(drop) != 2 {
		t.Fatalf("keep-last 1 kept %v and dropped %d: want the new owner's push kept, the stale one dropped", kept, len(drop))
	}
}

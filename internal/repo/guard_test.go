package repo_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stead-dev/stead/internal/repo"
)

// recordingGuard records what each scope operation asked of the guard and
// can refuse.
type recordingGuard struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (g *recordingGuard) take(kind, scope string) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail != nil {
		return nil, g.fail
	}
	g.calls = append(g.calls, kind+" "+scope)
	return func() {
		g.mu.Lock()
		g.calls = append(g.calls, "release "+kind+" "+scope)
		g.mu.Unlock()
	}, nil
}

func (g *recordingGuard) Shared(_ context.Context, scope string) (func(), error) {
	return g.take("shared", scope)
}

func (g *recordingGuard) Exclusive(ctx context.Context, scope string) (context.Context, func(), error) {
	rel, err := g.take("exclusive", scope)
	return ctx, rel, err
}

// TestScopeGuardOrdersPushesPrunesAndRepairs: a push holds its scope
// shared, prune and repair alone, each released when done; a guard that
// refuses stops the operation before it touches the repository.
func TestScopeGuardOrdersPushesPrunesAndRepairs(t *testing.T) {
	_, store, master := newRepo(t)
	ctx := context.Background()
	g := &recordingGuard{}
	r, err := repo.Open(ctx, store, master, repo.Options{Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := r.Scope(ctx, "t-acme", true)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), randBytes(1, 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sc.Push(ctx, src, repo.PushOptions{Source: "sandbox/sb-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Prune(ctx, repo.PruneOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Repair(ctx, repo.RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"shared t-acme", "release shared t-acme", "exclusive t-acme", "release exclusive t-acme",
		"exclusive t-acme", "release exclusive t-acme"}
	if !slices.Equal(g.calls, want) {
		t.Fatalf("guard calls %v, want %v", g.calls, want)
	}
	before, _ := sc.Snapshots(ctx)
	g.fail = errors.New("scope busy")
	if _, _, err := sc.Push(ctx, src, repo.PushOptions{Source: "sandbox/sb-1"}); err == nil {
		t.Fatal("a push went on without the guard")
	}
	if _, err := sc.Prune(ctx, repo.PruneOptions{}); err == nil {
		t.Fatal("a prune went on without the guard")
	}
	g.fail = nil
	if after, _ := sc.Snapshots(ctx); len(after) != len(before) {
		t.Fatalf("a refused push left a snapshot: %d before, %d after", len(before), len(after))
	}
}

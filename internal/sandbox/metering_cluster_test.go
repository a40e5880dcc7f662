package sandbox

import (
	"context"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/store"
)

// The repository is shared by the nodes of a cluster and the meter adds up
// what every node samples: only the node holding the repository-meter job
// counts a tenant's bytes there, or each node would bill them once.
func TestOnlyOneNodeMetersTheSharedRepository(t *testing.T) {
	ctx := context.Background()
	_, l1, l2, s1, s2 := twoNodes(t, 0)
	tn := store.DefaultTenant
	sb, err := s1.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l1.Acquire(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s1.testWrite(t, sb.ID, "/workspace/notes.md", "pushed")
	op, err := s1.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, nil)

	repoRows := func(ss *StorageSampler) int {
		t.Helper()
		samples, err := ss.StorageSamples(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, u := range samples {
			if u.Kind == store.StorageRepository && u.TenantID == tn && u.Bytes > 0 {
				n++
			}
		}
		return n
	}
	// A single node (no leader function) counts it.
	if n := repoRows(s1.StorageSampler(0)); n != 1 {
		t.Fatalf("a single node's sampler: %d repository rows, want 1", n)
	}
	j1, j2 := cluster.NewJob(l1, cluster.RepoMeterJobKey, nil), cluster.NewJob(l2, cluster.RepoMeterJobKey, nil)
	a := s1.StorageSampler(0).RepositoryOnlyWhen(j1.Lead)
	b := s2.StorageSampler(0).RepositoryOnlyWhen(j2.Lead)
	if total := repoRows(a) + repoRows(b); total != 1 {
		t.Fatalf("two nodes counted the shared repository %d times, want once", total)
	}
	// The leader stands down: the other takes over.
	if err := l1.Release(ctx, cluster.RepoMeterJobKey); err != nil {
		t.Fatal(err)
	}
	if n := repoRows(b); n != 1 {
		t.Fatalf("after n1 released the job, n2 counted %d repository rows, want 1", n)
	}
	if n := repoRows(a); n != 0 {
		t.Fatalf("n1 still counts the repository after n2 took the job: %d rows", n)
	}
}

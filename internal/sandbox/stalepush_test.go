package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/testutil"
)

// TestStalePushAfterFailoverNeverWins: n1 pushes a sandbox (epoch 1) and
// is cut off; n2 adopts it (epoch 2) from the push the store recorded. n1,
// still believing it holds the lease, pushes a local snapshot twice: the
// manifests land in the repository (epoch 1, newer in time) but are not
// published (the fenced record write fails, the push says so). The
// store-recorded paths (restore by sandbox, the next push's parent) use
// n1's legitimate push, not the stale one newer in time; once n2 pushed,
// the repository alone (Latest, the listing, retention) also prefers n2's
// epoch over the stale manifest's newer time; every manifest names its
// writer.
func TestStalePushAfterFailoverNeverWins(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	st, l1, _, s1, s2 := twoNodes(t, time.Minute+time.Second)
	tn := store.DefaultTenant
	sb, err := s1.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l1.Acquire(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s1.testWrite(t, sb.ID, "/workspace/notes.md", "v1")
	var p1 client.PushResult
	op, err := s1.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &p1)
	s1.testWrite(t, sb.ID, "/workspace/notes.md", "stale")
	stale, err := s1.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{Label: "stale"})
	if err != nil {
		t.Fatal(err)
	}
	// n1 is cut off: its copy stops; n2 takes the sandbox over.
	s1.rt.Kill(ctx, sb.ID)
	if _, err := s2.Adopt(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := s2.testRead(t, sb.ID, "/workspace/notes.md"); got != "v1" {
		t.Fatalf("adopted notes = %q, want the recorded push's v1", got)
	}
	sc, err := s2.scope(ctx, tn, false)
	if err != nil {
		t.Fatal(err)
	}
	stalePush := func() {
		t.Helper()
		op, err := s1.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Snapshot: stale.ID, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if op.State == "succeeded" {
			t.Fatalf("n1's push after the takeover succeeded: %s", op.Result)
		}
		t.Logf("n1's stale push: %s", op.Error)
	}
	source := "sandbox/" + sb.ID
	stalePush()
	all, err := sc.Snapshots(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("manifests after the first stale push: %d, %v", len(all), err)
	}
	if w := all[1].Writer; w != (repo.Writer{Node: "n1", Epoch: 1}) || all[1].ID.String() == p1.RemoteSnapshot.ID {
		t.Fatalf("the stale manifest's writer %+v (id %s)", w, all[1].ID)
	}
	// The store's record wins over the newer stale manifest of one epoch.
	cur, err := st.GetSandbox(ctx, tn, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s2.lastPush(ctx, sc, cur); err != nil || m.ID.String() != p1.RemoteSnapshot.ID {
		t.Fatalf("recorded last push %v, %v; want n1's published push %s", m, err, p1.RemoteSnapshot.ID)
	}
	if m, err := s2.resolveRemote(ctx, sc, tn, "", sb.ID); err != nil || m.ID.String() != p1.RemoteSnapshot.ID {
		t.Fatalf("restore by sandbox picks %v, %v; want %s", m, err, p1.RemoteSnapshot.ID)
	}

	var p2 client.PushResult
	op, err = s2.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &p2)
	if p2.RemoteSnapshot.Parent != p1.RemoteSnapshot.ID {
		t.Fatalf("n2's push is incremental to %s, want the recorded %s", p2.RemoteSnapshot.Parent, p1.RemoteSnapshot.ID)
	}
	stalePush()
	latest, err := sc.Latest(ctx, source)
	if err != nil || latest.ID.String() != p2.RemoteSnapshot.ID || latest.Writer != (repo.Writer{Node: "n2", Epoch: 2}) {
		t.Fatalf("latest by the repository alone: %+v, %v; want n2's push %s at epoch 2", latest, err, p2.RemoteSnapshot.ID)
	}
	all, err = sc.Snapshots(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("listing: %d manifests, %v", len(all), err)
	}
	if all[3].ID != latest.ID {
		t.Fatalf("the listing ends with %s, want n2's %s", all[3].ID, latest.ID)
	}
	list, err := s2.ListRemoteSnapshots(ctx, tn, sb.ID)
	if err != nil || len(list) != 4 || list[3].ID != p2.RemoteSnapshot.ID || list[3].WriterNode != "n2" || list[3].WriterEpoch != 2 {
		t.Fatalf("remote listing %+v %v", list, err)
	}
	if _, drop := (repo.Policy{KeepLast: 1}).Apply(all, time.Now()); len(drop) != 3 || slicesHasID(drop, p2.RemoteSnapshot.ID) {
		t.Fatalf("keep-last 1 drops %d, n2's among them: %v", len(drop), slicesHasID(drop, p2.RemoteSnapshot.ID))
	}
	got, _ := s2.GetSandbox(ctx, tn, sb.ID)
	if got.LastPushID != p2.RemoteSnapshot.ID {
		t.Fatalf("recorded last push %s, want n2's %s", got.LastPushID, p2.RemoteSnapshot.ID)
	}
}

func slicesHasID(ms []*repo.Manifest, id string) bool {
	for _, m := range ms {
		if m.ID.String() == id {
			return true
		}
	}
	return false
}

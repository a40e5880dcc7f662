package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
	"github.com/stead-dev/stead/internal/testutil"
	"github.com/stead-dev/stead/internal/treedigest"
)

// newNodeService runs the real service of one node of a cluster: its own
// dir pool and runtime, on the shared store st, with owner as its leases.
func newNodeService(t *testing.T, st store.Store, owner Owner) *Service {
	t.Helper()
	s := serviceOn(t, st, t.TempDir(), Options{Owner: owner})
	if _, err := s.Bootstrap(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func nodeLeases(t *testing.T, st store.Store, node string) *cluster.Leases {
	t.Helper()
	return nodeLeasesAt(t, st, node, 0)
}

// twoNodes is two node services, n1 and n2, on one SQLite store and one
// initialised repository; n2's clock is skew ahead of n1's.
func twoNodes(t *testing.T, skew time.Duration) (st store.Store, l1, l2 *cluster.Leases, s1, s2 *Service) {
	t.Helper()
	ctx := context.Background()
	sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	l1, l2 = nodeLeases(t, sq, "n1"), nodeLeasesAt(t, sq, "n2", skew)
	s1, s2 = newNodeService(t, sq, l1), newNodeService(t, sq, l2)
	repoDir := t.TempDir()
	withRepo(t, s1, repoDir)
	withRepo(t, s2, repoDir)
	if _, err := s1.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	return sq, l1, l2, s1, s2
}

// nodeLeasesAt is nodeLeases on a clock ahead by skew.
func nodeLeasesAt(t *testing.T, st store.Store, node string, skew time.Duration) *cluster.Leases {
	t.Helper()
	l, err := cluster.NewLeases(cluster.LeaseOptions{Store: st, Node: node, TTL: time.Minute,
		Clock: func() time.Time { return time.Now().Add(skew) }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// rootDigest digests a sandbox root without what a start rewrites.
func rootDigest(t *testing.T, s *Service, dataset string) string {
	t.Helper()
	d, err := treedigest.Digest(context.Background(), s.pool.Path(dataset), treedigest.Options{NoMtimeDirs: true,
		Exclude: []string{"/var/log", "/run", "/tmp", "/dev", "/proc", "/sys", "/.stead"}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestAdoptRestoresALostSandboxOnAnotherNodeFromItsLastPush: node n1 runs a
// sandbox with a volume, pushes both, writes more, and dies. The failover
// coordinator (real, on the shared SQLite store) marks the sandbox lost and
// asks n2 to adopt it: n2's service restores it under the same id, name
// and volume id, by tree digest equal to the push, running, at epoch 2;
// what was written after the push is gone (the RPO). A sandbox whose
// volume was never pushed is not adopted: it stays lost, with its lease
// free for another try.
func TestAdoptRestoresALostSandboxOnAnotherNodeFromItsLastPush(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	// n2 acts after n1's leases (a minute) lapsed on their own: its clock
	// is that far ahead, as failover's below.
	st, l1, l2, s1, s2 := twoNodes(t, time.Minute+time.Second)
	tn := store.DefaultTenant

	vol, err := s1.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "data"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s1.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent",
		Volumes: []client.VolumeMount{{Volume: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Failover != client.FailoverRestore || sb.LastPushAt != nil {
		t.Fatalf("new sandbox: failover %q, last push %v", sb.Failover, sb.LastPushAt)
	}
	if _, err := l1.Acquire(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s1.testWrite(t, sb.ID, "/workspace/notes.md", "pushed")
	if err := os.WriteFile(filepath.Join(s1.pool.Path(volumeDataset(vol.ID)), "kept.txt"), []byte("volume data"), 0o644); err != nil {
		t.Fatal(err)
	}
	var pr client.PushResult
	op, err := s1.PushSandbox(ctx, tn, sb.ID, client.PushRequest{IncludeVolumes: true, Wait: true})
	opDone(t, op, err, &pr)
	pushedDigest := rootDigest(t, s1, snapshotDataset(pr.RemoteSnapshot.Labels["local_snapshot"]))
	got, _ := s1.GetSandbox(ctx, tn, sb.ID)
	if got.LastPushAt == nil || got.LastPushID != pr.RemoteSnapshot.ID {
		t.Fatalf("after the push the view says last push %v %q, want %q", got.LastPushAt, got.LastPushID, pr.RemoteSnapshot.ID)
	}
	s1.testWrite(t, sb.ID, "/workspace/after.md", "written after the last push")

	// A second sandbox whose volume has no push.
	if _, err := s1.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "scratch"}); err != nil {
		t.Fatal(err)
	}
	other, err := s1.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "other",
		Volumes: []client.VolumeMount{{Volume: "scratch", Path: "/scratch"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l1.Acquire(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	op, err = s1.PushSandbox(ctx, tn, other.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, nil)

	// n1 dies: its sandboxes' processes are gone, its heartbeat stops.
	s1.rt.Kill(ctx, sb.ID)
	s1.rt.Kill(ctx, other.ID)
	now := time.Now()
	for name, at := range map[string]time.Time{"n1": now.Add(-5 * time.Minute), "n2": now} {
		if _, err := st.HeartbeatNode(ctx, store.Node{Name: name, Address: "127.0.0.1:1", HeartbeatAt: at, StartedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	var adoptErrs []error
	// The coordinator acts once n1's leases lapsed on their own (a
	// minute): its clock is past them.
	f, err := cluster.NewFailover(cluster.FailoverOptions{Store: st, Node: "n2", Grace: 30 * time.Second,
		Clock: func() time.Time { return time.Now().Add(time.Minute + time.Second) },
		Pick: func(ctx context.Context, _ store.Sandbox, exclude string) (store.Node, error) {
			if exclude != "n1" {
				t.Errorf("pick excludes %q, want n1", exclude)
			}
			return st.GetNode(ctx, "n2")
		},
		Adopt: func(ctx context.Context, _ store.Node, id string) error {
			_, err := s2.Adopt(ctx, id)
			adoptErrs = append(adoptErrs, err)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Adopted, []string{sb.ID}) || !slices.Equal(res.Failed, []string{other.ID}) {
		t.Fatalf("failover pass: %+v (adopt errors %v)", res, adoptErrs)
	}

	// The adopted sandbox: same id, name and volume, the push's files,
	// running on n2 at a higher epoch.
	got, err = s2.GetSandbox(ctx, tn, "agent")
	if err != nil || got.ID != sb.ID || got.State != "running" || len(got.Volumes) != 1 || got.Volumes[0].Volume != vol.ID {
		t.Fatalf("adopted sandbox: %+v %v", got, err)
	}
	if epoch, ok := l2.Held(sb.ID); !ok || epoch != 2 {
		t.Fatalf("n2's lease of the adopted sandbox: epoch %d held %v, want 2", epoch, ok)
	}
	if got := s2.testRead(t, sb.ID, "/workspace/notes.md"); got != "pushed" {
		t.Fatalf("notes on n2 = %q", got)
	}
	if got := s2.testRead(t, sb.ID, "/workspace/after.md"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("a file written after the last push came back: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(s2.pool.Path(volumeDataset(vol.ID)), "kept.txt")); err != nil || string(b) != "volume data" {
		t.Fatalf("the volume on n2: %q %v", b, err)
	}
	if v, err := st.GetVolume(ctx, tn, vol.ID); err != nil || v.Node != "n2" {
		t.Fatalf("the adopted volume's record names node %q (%v), want n2, where its data now is", v.Node, err)
	}
	if _, err := s2.Exec(ctx, tn, sb.ID, client.ExecRequest{Command: []string{"/bin/true"}}, nil); err != nil {
		t.Fatalf("exec in the adopted sandbox: %v", err)
	}
	if _, err := s2.StopSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	if d := rootDigest(t, s2, datasetName(sb.ID)); d != pushedDigest {
		t.Fatalf("the adopted root's digest %s differs from the push's %s", d, pushedDigest)
	}

	// The sandbox whose volume has no push stays lost, its lease free.
	o, _ := st.GetSandbox(ctx, tn, other.ID)
	if o.State != store.StateLost || !errors.Is(adoptErrs[len(adoptErrs)-1], errs.ErrConflict) {
		t.Fatalf("sandbox with an unpushed volume: %s, adopt error %v", o.State, adoptErrs)
	}
	if _, err := s2.StartSandbox(ctx, tn, other.ID); !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("start of a lost sandbox: %v", err)
	}
	if v, _ := s2.GetSandbox(ctx, tn, other.ID); v.State != "lost" || v.StopReason != cluster.StopReasonNodeLost {
		t.Fatalf("view of a lost sandbox: %s %q", v.State, v.StopReason)
	}
	if own, _ := st.GetOwnership(ctx, other.ID); own.ValidAt(time.Now().Add(time.Minute + time.Second)) { // n2's clock
		t.Fatalf("a failed adoption keeps the lease: %+v", own)
	}
	if ok, _ := s2.pool.Exists(ctx, datasetName(other.ID)); ok {
		t.Fatal("a refused adoption left a root on n2")
	}

	// A retried adopt after a partial one redoes it: leftovers of an
	// interrupted restore (a half root, a temporary volume) are replaced.
	if _, err := st.ExpireNodeOwnerships(ctx, "n2", time.Now()); err != nil {
		t.Fatal(err)
	}
	l2.RenewAll(ctx) // n2 learns it lost the lease
	s2.rt.Kill(ctx, sb.ID)
	cur, _ := st.GetSandbox(ctx, tn, sb.ID)
	if cur, err = cluster.MarkLost(cur, cluster.LostMark{Node: "n2", Epoch: 2, State: store.StateRunning, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateSandbox(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s2.pool.Path(datasetName(sb.ID)), "workspace", "notes.md"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s2.pool.Delete(ctx, volumeDataset(vol.ID)); err != nil {
		t.Fatal(err)
	}
	if err := s2.pool.Create(ctx, adoptTempVolume(vol.ID)); err != nil {
		t.Fatal(err)
	}
	again, err := s2.Adopt(ctx, sb.ID)
	if err != nil || again.State != "running" {
		t.Fatalf("retried adopt: %+v %v", again, err)
	}
	if epoch, ok := l2.Held(sb.ID); !ok || epoch != 3 {
		t.Fatalf("retried adopt's epoch %d %v, want 3", epoch, ok)
	}
	if got := s2.testRead(t, sb.ID, "/workspace/notes.md"); got != "pushed" {
		t.Fatalf("notes after the retried adopt = %q", got)
	}
	if ok, _ := s2.pool.Exists(ctx, adoptTempVolume(vol.ID)); ok {
		t.Fatal("the temporary volume of the interrupted adopt is left")
	}
	// It runs here now: another adopt is refused and changes nothing.
	if _, err := s2.Adopt(ctx, sb.ID); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("adopt of a sandbox running here: %v", err)
	}
	if got := s2.testRead(t, sb.ID, "/workspace/notes.md"); got != "pushed" {
		t.Fatalf("notes after a refused adopt = %q", got)
	}
}

func TestCreateRefusesAnUnknownFailoverPolicyAndShowsTheGivenOne(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "x", Failover: "maybe", NoStart: true}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("failover maybe: %v", err)
	}
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "y", Failover: "none", NoStart: true})
	if err != nil || sb.Failover != client.FailoverNone {
		t.Fatalf("failover none: %+v %v", sb, err)
	}
	rec, _ := s.st.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if cluster.FailoverPolicyOf(rec) != cluster.FailoverNone {
		t.Fatal("the coordinator does not read the policy the service wrote")
	}
}

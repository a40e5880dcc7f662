package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/template"
	"github.com/stead-dev/stead/internal/treedigest"
)

// runSpares runs the spares of s, n per used template, until the test
// ends or stop is called (then they are deleted). Templates get a base
// at once (firstBase 0).
func runSpares(t *testing.T, s *Service, n int) (stop func()) {
	t.Helper()
	s.spares.firstBase = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunSpares(ctx, n); close(done) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	defer waitFor(t, "the spares to run", func() bool {
		s.spares.mu.Lock()
		defer s.spares.mu.Unlock()
		return s.spares.n == n
	})
	return stop
}

// spareNames lists the spare datasets in s's pool, bases left out.
func spareNames(t *testing.T, s *Service) []string {
	t.Helper()
	return spareDatasets(t, s, func(id string) bool { return isSpare(id) && !isSpareBase(id) })
}

// baseNames lists the bases of spares in s's pool.
func baseNames(t *testing.T, s *Service) []string {
	t.Helper()
	return spareDatasets(t, s, isSpareBase)
}

// leftSpares lists the spares and bases in s's pool.
func leftSpares(t *testing.T, s *Service) []string {
	t.Helper()
	return spareDatasets(t, s, isSpare)
}

func spareDatasets(t *testing.T, s *Service, match func(id string) bool) []string {
	t.Helper()
	ids, err := s.pool.List(context.Background(), pool.KindSandbox)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, id := range ids {
		if match(id) {
			out = append(out, pool.KindSandbox+"/"+id)
		}
	}
	return out
}

// waitSpares waits until s holds want spares and the bases it names, and
// they are all the pool has.
func waitSpares(t *testing.T, s *Service, want int) []string {
	t.Helper()
	waitFor(t, "the spares to fill", func() bool {
		st := s.spareStats()
		return st.Ready == want && len(spareNames(t, s)) == want && len(baseNames(t, s)) == st.Bases
	})
	return spareNames(t, s)
}

// subvolUUIDs returns the UUID and parent UUID of the subvolume at dir
// (btrfs subvolume show).
func subvolUUIDs(t *testing.T, dir string) (uuid, parent string) {
	t.Helper()
	out, err := exec.Command("btrfs", "subvolume", "show", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs subvolume show %s: %v: %s", dir, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		switch v = strings.TrimSpace(v); {
		case ok && k == "UUID":
			uuid = v
		case ok && k == "Parent UUID":
			parent = v
		}
	}
	if uuid == "" || parent == "" {
		t.Fatalf("btrfs subvolume show %s: no UUIDs in %s", dir, out)
	}
	return uuid, parent
}

// markedTemplate builds template id of tenant: a root holding the file
// /marker with content mark (creates from it use NoStart: nothing runs).
func markedTemplate(t *testing.T, s *Service, tenant, id, mark string) {
	t.Helper()
	_, err := s.buildTemplate(context.Background(), tenant, id, "oci", "test:"+mark, func(dst string) (template.ImageInfo, error) {
		if err := os.MkdirAll(filepath.Join(dst, "etc"), 0o755); err != nil {
			return template.ImageInfo{}, err
		}
		return template.ImageInfo{}, os.WriteFile(filepath.Join(dst, "marker"), []byte(mark), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func digestOf(t *testing.T, s *Service, ds string) string {
	t.Helper()
	d, err := treedigest.Digest(context.Background(), s.pool.Path(ds), treedigest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func specOf(t *testing.T, s *Service, tenant, id string) spec {
	t.Helper()
	sb, err := s.st.GetSandbox(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestCreateTakesASpareAndARefillMakesAnother: the first create from a
// template clones it (no spare yet) and starts the refill; the next takes
// a spare: its root is the template's tree exactly, the spare's name is
// gone from the pool, its record names the spare (for a redo after a
// crash), and a refill makes a new spare in its place.
func TestCreateTakesASpareAndARefillMakesAnother(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	markedTemplate(t, s, tn, "t1", "one")
	runSpares(t, s, 2)
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "first", Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
		t.Fatal(err)
	}
	if st := s.spareStats(); st.Taken != 0 || st.Missed != 1 {
		t.Fatalf("first create: %+v", st)
	}
	before := waitSpares(t, s, 2)

	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "second", Template: "t1", DiskBytes: 64 << 20, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.spareStats(); st.Taken != 1 {
		t.Fatalf("the second create took no spare: %+v", st)
	}
	sp := specOf(t, s, tn, sb.ID)
	if !slices.Contains(before, sp.Spare) {
		t.Fatalf("the record names spare %q; the spares were %v", sp.Spare, before)
	}
	if ok, _ := s.pool.Exists(ctx, sp.Spare); ok {
		t.Fatalf("spare %s is still in the pool after its take", sp.Spare)
	}
	if got, want := digestOf(t, s, datasetName(sb.ID)), digestOf(t, s, templateDataset(tn, "t1")); got != want {
		t.Fatalf("the root taken from a spare differs from the template: %s, want %s", got, want)
	}
	after := waitSpares(t, s, 2)
	fresh := 0
	for _, n := range after {
		if !slices.Contains(before, n) {
			fresh++
		}
	}
	if fresh != 1 || s.spareStats().Made != 3 {
		t.Fatalf("after the take: spares %v (before %v), %+v", after, before, s.spareStats())
	}
	// A create that names no template of these (a fork) never takes one.
	snap, err := s.CreateSnapshot(ctx, tn, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	forks, err := s.Fork(ctx, tn, snap.ID, client.ForkRequest{Name: "fork", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.spareStats(); st.Taken != 1 || st.Ready != 2 || specOf(t, s, tn, forks[0].ID).Spare != "" {
		t.Fatalf("a fork took a spare, or kept its source's: %+v", st)
	}
}

// TestSpareRootHasTheSandboxsDiskQuota: the quota set after the rename is
// on the renamed subvolume (a qgroup belongs to the subvolume, which the
// rename keeps): writes past it fail.
func TestSpareRootHasTheSandboxsDiskQuota(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	runSpares(t, s, 1)
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "first", DiskBytes: 64 << 20, NoStart: true}); err != nil {
		t.Fatal(err)
	}
	waitSpares(t, s, 1)
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "small", DiskBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.spareStats(); st.Taken != 1 {
		t.Fatalf("the create took no spare: %+v", st)
	}
	out, code := sh(t, s, sb.ID, "dd if=/dev/zero of=/home/agent/big bs=1M count=100 conv=fsync 2>&1")
	if code == 0 || !strings.Contains(out, "quota") {
		t.Fatalf("100 MiB into a 64 MiB sandbox made from a spare: exit %d: %s", code, out)
	}
}

// TestSparesAreSnapshotsOfABaseThatIsReplaced: the spares of a template
// are snapshots of its base, an unshared read-only copy of it (no parent,
// the template's tree exactly); a base that has served its share is
// replaced by a new one and deleted, and the roots taken from it keep
// their contents.
func TestSparesAreSnapshotsOfABaseThatIsReplaced(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	markedTemplate(t, s, tn, "t1", "one")
	tmpl := templateDataset(tn, "t1")
	want := digestOf(t, s, tmpl)
	runSpares(t, s, 2)
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "first", Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
		t.Fatal(err)
	}
	first := waitSpares(t, s, 2)
	bases := baseNames(t, s)
	if st := s.spareStats(); len(bases) != 1 || st.Bases != 1 || st.BasesMade != 1 {
		t.Fatalf("bases %v, %+v; want one", bases, st)
	}
	base := bases[0]
	baseUUID, parent := subvolUUIDs(t, s.pool.Path(base))
	if parent != "-" {
		t.Fatalf("base %s has parent %s: it is a snapshot, not an unshared copy", base, parent)
	}
	if got := digestOf(t, s, base); got != want {
		t.Fatalf("base %s differs from the template: %s, want %s", base, got, want)
	}
	if err := os.WriteFile(filepath.Join(s.pool.Path(base), "x"), nil, 0o644); err == nil {
		t.Fatalf("base %s is writable", base)
	}
	for _, n := range first {
		if _, parent := subvolUUIDs(t, s.pool.Path(n)); parent != baseUUID {
			t.Fatalf("spare %s has parent %s, want the base %s", n, parent, baseUUID)
		}
	}

	// The base has served its share: the next refill replaces it.
	s.spares.mu.Lock()
	b := s.spares.bases[tmpl]
	b.limit = b.served
	s.spares.bases[tmpl] = b
	s.spares.mu.Unlock()
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "second", Template: "t1", DiskBytes: 64 << 20, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	after := waitSpares(t, s, 2)
	bases = baseNames(t, s)
	if st := s.spareStats(); len(bases) != 1 || bases[0] == base || st.BasesMade != 2 {
		t.Fatalf("after the base served its share: bases %v (was %s), %+v", bases, base, st)
	}
	if ok, _ := s.pool.Exists(ctx, base); ok {
		t.Fatalf("the replaced base %s is still in the pool", base)
	}
	newUUID, _ := subvolUUIDs(t, s.pool.Path(bases[0]))
	for _, n := range after {
		_, parent := subvolUUIDs(t, s.pool.Path(n))
		if fresh := !slices.Contains(first, n); fresh && parent != newUUID || !fresh && parent != baseUUID {
			t.Fatalf("spare %s (new: %v) has parent %s; old base %s, new %s", n, fresh, parent, baseUUID, newUUID)
		}
	}
	if got := digestOf(t, s, datasetName(sb.ID)); got != want {
		t.Fatalf("a root taken from the deleted base differs from the template: %s, want %s", got, want)
	}
}

// TestSparesOfATemplateWithoutABaseAreItsSnapshots: a template has
// spares of its own, snapshots of the template itself, before its first
// base, when its last base took long to copy (until it has had as many as
// such a base would serve), and for a while after its base failed.
func TestSparesOfATemplateWithoutABaseAreItsSnapshots(t *testing.T) {
	for _, c := range []string{"before its first base", "slow to copy", "failing"} {
		t.Run(c, func(t *testing.T) {
			e := newBtrfsEnv(t, 2<<30, Options{})
			s := e.s
			ctx := context.Background()
			tn := store.DefaultTenant
			markedTemplate(t, s, tn, "t1", "one")
			tmpl := templateDataset(tn, "t1")
			if c == "failing" {
				s.pool = clonePool{Pool: e.pool, clone: func(ctx context.Context, src, dst string, opts pool.CloneOptions) error {
					if opts.Unshared {
						return errors.New("injected")
					}
					return e.pool.Clone(ctx, src, dst, opts)
				}}
			}
			runSpares(t, s, 2)
			s.spares.mu.Lock()
			switch c {
			case "before its first base":
				s.spares.firstBase = 3
			case "slow to copy":
				s.spares.copied[tmpl] = time.Second // a base would serve 632
			}
			s.spares.mu.Unlock()
			tmplUUID, _ := subvolUUIDs(t, s.pool.Path(tmpl))
			for i := range 3 {
				if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: fmt.Sprint("sb", i), Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
					t.Fatal(err)
				}
				waitSpares(t, s, 2)
			}
			// 4 spares made: the first base is due after the third.
			spares, bases := spareNames(t, s), baseNames(t, s)
			st := s.spareStats()
			if c == "before its first base" {
				if st.BasesMade != 1 || len(bases) != 1 {
					t.Fatalf("no base after the template's own spares: %v, %+v", bases, st)
				}
				baseUUID, _ := subvolUUIDs(t, s.pool.Path(bases[0]))
				var parents []string
				for _, n := range spares {
					_, parent := subvolUUIDs(t, s.pool.Path(n))
					parents = append(parents, parent)
				}
				if slices.Sort(parents); !slices.Equal(parents, slices.Sorted(slices.Values([]string{tmplUUID, baseUUID}))) {
					t.Fatalf("spares' parents %v; want one of the template (%s) and one of the base (%s)", parents, tmplUUID, baseUUID)
				}
				return
			}
			if st.Bases != 0 || st.BasesMade != 0 || len(bases) != 0 {
				t.Fatalf("bases %v, %+v; want none", bases, st)
			}
			for _, n := range spares {
				if _, parent := subvolUUIDs(t, s.pool.Path(n)); parent != tmplUUID {
					t.Fatalf("spare %s has parent %s, want the template %s", n, parent, tmplUUID)
				}
			}
		})
	}
}

// TestRebaseAfterBalancesTheCopyAgainstTheGrowth: a base serves
// sqrt(2*copy/snapGrowth) spares, within its bounds.
func TestRebaseAfterBalancesTheCopyAgainstTheGrowth(t *testing.T) {
	for _, c := range []struct {
		copy time.Duration
		want int
	}{{0, baseMinServe}, {time.Millisecond, 20}, {20 * time.Millisecond, 89}, {100 * time.Millisecond, 200}, {time.Second, 632}, {time.Hour, baseMaxServe}} {
		if got := rebaseAfter(c.copy); got != c.want {
			t.Errorf("rebaseAfter(%v) = %d, want %d", c.copy, got, c.want)
		}
	}
}

// TestSpareIsNeverStaleAfterItsTemplateChanges: a template deleted and
// built again (new contents, same dataset name) after its spares were
// made gives the next create the new contents, never a spare of the old
// (this fails when templateChanging does nothing); and a change during a
// refill's clone discards that clone.
func TestSpareIsNeverStaleAfterItsTemplateChanges(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	markedTemplate(t, s, tn, "t1", "old")
	runSpares(t, s, 2)
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "a", Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
		t.Fatal(err)
	}
	waitSpares(t, s, 2)
	if _, err := s.DeleteSandbox(ctx, tn, "a", true); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTemplate(ctx, tn, "t1"); err != nil {
		t.Fatal(err)
	}
	markedTemplate(t, s, tn, "t1", "new")
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "b", Template: "t1", DiskBytes: 64 << 20, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(s.pool.Path(datasetName(sb.ID)), "marker"))
	if err != nil || string(got) != "new" {
		t.Fatalf("a create after the template was built again has marker %q (%v), want new; %+v", got, err, s.spareStats())
	}
	if specOf(t, s, tn, sb.ID).Spare != "" {
		t.Fatal("the create after the change took a spare made before it")
	}
	// The refill makes spares (and their base) of the new contents.
	for _, n := range append(waitSpares(t, s, 2), baseNames(t, s)...) {
		if got, _ := os.ReadFile(filepath.Join(s.pool.Path(n), "marker")); string(got) != "new" {
			t.Fatalf("spare %s made after the change has marker %q", n, got)
		}
	}

}

// TestSpareClonedDuringATemplateChangeIsDiscarded: a change of the
// template that begins and ends while a refill clones it (into a base or
// from the base into a spare) discards the clone (it may have seen the
// old dataset, a half-built one or none), and the base with it: nothing
// stale is kept, and creates clone meanwhile.
func TestSpareClonedDuringATemplateChangeIsDiscarded(t *testing.T) {
	for _, stage := range []struct {
		name  string
		match func(id string) bool
	}{
		{"base", isSpareBase},
		{"spare", func(id string) bool { return isSpare(id) && !isSpareBase(id) }},
	} {
		t.Run(stage.name, func(t *testing.T) {
			e := newBtrfsEnv(t, 2<<30, Options{})
			s := e.s
			ctx := context.Background()
			tn := store.DefaultTenant
			markedTemplate(t, s, tn, "t1", "one")
			tmpl := templateDataset(tn, "t1")
			var changed atomic.Int64
			s.pool = clonePool{Pool: e.pool, clone: func(ctx context.Context, src, dst string, opts pool.CloneOptions) error {
				err := e.pool.Clone(ctx, src, dst, opts)
				if stage.match(strings.TrimPrefix(dst, pool.KindSandbox+"/")) {
					s.templateChanging(ctx, tmpl)() // as a rebuild would, during this clone
					changed.Add(1)
				}
				return err
			}}
			runSpares(t, s, 2)
			for i, name := range []string{"a", "b"} {
				if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: name, Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the refill's clone and its discard", func() bool {
					return changed.Load() == int64(i+1) && len(leftSpares(t, s)) == 0
				})
				if st := s.spareStats(); st.Ready != 0 || st.Bases != 0 || st.Made != 0 || st.Taken != 0 {
					t.Fatalf("a clone made during a change of its template was kept: %+v", st)
				}
			}
		})
	}
}

// clonePool is a pool whose Clone is clone (a fault injected into it).
type clonePool struct {
	pool.Pool
	clone func(ctx context.Context, src, dst string, opts pool.CloneOptions) error
}

func (p clonePool) Clone(ctx context.Context, src, dst string, opts pool.CloneOptions) error {
	return p.clone(ctx, src, dst, opts)
}

// TestRestartDeletesSparesAndRedoesATakeACrashUndid: what a daemon left
// (killed with spares ready, in the middle of a take, or by a crash of
// the machine that undid a take's rename) is settled by the next one's
// Reconcile: a sandbox whose root went back to its spare gets it again,
// a half-made create goes with its spare, every other spare is deleted.
func TestRestartDeletesSparesAndRedoesATakeACrashUndid(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	markedTemplate(t, s, tn, "t1", "one")
	runSpares(t, s, 2)
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "a", Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
		t.Fatal(err)
	}
	waitSpares(t, s, 2)
	b, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "b", Template: "t1", DiskBytes: 64 << 20, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	taken := specOf(t, s, tn, b.ID).Spare
	want := digestOf(t, s, datasetName(b.ID))
	waitSpares(t, s, 2) // the first daemon "dies" holding these

	// The machine crashed before the take's rename was committed: the
	// root is back under the spare's name.
	if err := e.pool.Rename(ctx, datasetName(b.ID), taken); err != nil {
		t.Fatal(err)
	}
	// A create was killed after its record and before its rename.
	half := pool.KindSandbox + "/" + newSpareID()
	if err := e.pool.Clone(ctx, templateDataset(tn, "t1"), half, pool.CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	hs, _ := json.Marshal(spec{InstanceType: "custom", Limits: client.Limits{DiskBytes: 64 << 20}, Spare: half})
	now := s.now()
	if _, err := s.st.CreateSandbox(ctx, store.Sandbox{ID: newID(), TenantID: tn, Name: "half", TemplateID: "t1", State: store.StateCreating,
		Spec: hs, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}

	next := New(s.opts) // the next daemon
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, s, datasetName(b.ID)); got != want {
		t.Fatalf("the redone root differs: %s, want %s", got, want)
	}
	if left := leftSpares(t, s); len(left) != 0 {
		t.Fatalf("spares or bases left after the restart: %v", left)
	}
	if _, err := s.GetSandbox(ctx, tn, "half"); err == nil {
		t.Fatal("the half-made create is still recorded")
	}
	if got, err := next.GetSandbox(ctx, tn, "b"); err != nil || got.State != "stopped" {
		t.Fatalf("sandbox b after the restart: %+v %v", got, err)
	}
}

// TestTenantDeletionDeletesItsSpares: deleting a tenant deletes the
// spares of its templates (with the templates), and no refill brings them
// back; another tenant's spares of a template of the same id stay.
func TestTenantDeletionDeletesItsSpares(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	markedTemplate(t, s, "acme", "t1", "acme")
	markedTemplate(t, s, store.DefaultTenant, "t1", "default")
	runSpares(t, s, 2)
	for _, tn := range []string{"acme", store.DefaultTenant} {
		if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "a", Template: "t1", DiskBytes: 64 << 20, NoStart: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitSpares(t, s, 4)
	if _, err := s.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	s.wakeSpares()
	left := waitSpares(t, s, 2)
	for _, n := range append(left, baseNames(t, s)...) {
		if got, _ := os.ReadFile(filepath.Join(s.pool.Path(n), "marker")); string(got) != "default" {
			t.Fatalf("spare %s of the deleted tenant's template is left (marker %q)", n, got)
		}
	}
}

// TestSparesAreNoSandboxes: spares are nobody's sandbox: not listed, not
// lost copies, not metered, not in a tenant's disk use, and a Reconcile
// of the service holding them keeps them.
func TestSparesAreNoSandboxes(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	markedTemplate(t, s, tn, "t1", "one")
	runSpares(t, s, 2)
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "a", Template: "t1", DiskBytes: 64 << 20, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	waitSpares(t, s, 2)
	spares := leftSpares(t, s)
	if len(spares) != 3 {
		t.Fatalf("two spares and their base: %v", spares)
	}
	if list, err := s.ListSandboxes(ctx, tn, true); err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if lost, err := s.LostCopies(ctx); err != nil || len(lost) != 0 {
		t.Fatalf("lost copies: %+v %v", lost, err)
	}
	samples, err := s.StorageSampler(0).StorageSamples(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range samples {
		if u.Kind == "sandbox" && u.Subject != sb.ID || strings.Contains(u.Subject, sparePrefix) {
			t.Fatalf("metered: %+v", u)
		}
	}
	if use, err := s.quotaUsage(ctx, tn); err != nil || use.disk != 64<<20 {
		t.Fatalf("the tenant's disk use: %+v %v", use, err)
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := leftSpares(t, s); !slices.Equal(got, spares) || s.spareStats().Ready != 2 {
		t.Fatalf("after a Reconcile of the service holding them: %v, were %v", got, spares)
	}
}

// TestSparesOffWithZeroAndOnTheDirPool: RunSpares with 0 keeps none, and
// the dir pool (whose clones copy) none at all: creates clone.
func TestSparesOffWithZeroAndOnTheDirPool(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	d := newService(t)
	ctx := context.Background()
	for i, c := range []struct {
		s *Service
		n int
	}{{e.s, 0}, {d, 2}} {
		s := c.s
		done := make(chan struct{})
		go func() { s.RunSpares(ctx, c.n); close(done) }()
		<-done // returns at once: nothing to run
		markedTemplate(t, s, store.DefaultTenant, "t1", "one")
		for _, name := range []string{"a", "b"} {
			sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: name, Template: "t1", DiskBytes: 64 << 20, NoStart: true})
			if err != nil {
				t.Fatal(err)
			}
			if sp := specOf(t, s, store.DefaultTenant, sb.ID); sp.Spare != "" {
				t.Fatalf("case %d: a create took spare %s", i, sp.Spare)
			}
		}
		if st, left := s.spareStats(), leftSpares(t, s); st != (spareStats{}) || len(left) != 0 {
			t.Fatalf("case %d: %+v %v", i, st, left)
		}
	}
}

// TestSpareNamedByASandboxWithoutItsRootIsKept: the start-up cleanup
// keeps a spare that a sandbox's record names while that sandbox's root
// is missing (its redo failed, or the sandbox is another node's to
// reconcile): it may be the only copy of that root. Other spares go.
func TestSpareNamedByASandboxWithoutItsRootIsKept(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	markedTemplate(t, s, tn, "t1", "one")
	named, other := pool.KindSandbox+"/"+newSpareID(), pool.KindSandbox+"/"+newSpareID()
	for _, n := range []string{named, other} {
		if err := e.pool.Clone(ctx, templateDataset(tn, "t1"), n, pool.CloneOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hs, _ := json.Marshal(spec{InstanceType: "custom", Limits: client.Limits{DiskBytes: 64 << 20}, Spare: named})
	rec := store.Sandbox{ID: newID(), TenantID: tn, Name: "rootless", TemplateID: "t1", State: store.StateStopped, Spec: hs}
	if err := s.cleanSpareLeftovers(ctx, []store.Sandbox{rec}); err != nil {
		t.Fatal(err)
	}
	if left := spareNames(t, s); len(left) != 1 || left[0] != named {
		t.Fatalf("spares after the cleanup: %v, want only %s", left, named)
	}
	// Once the sandbox has its root again, the spare is a leftover.
	if err := e.pool.Clone(ctx, templateDataset(tn, "t1"), datasetName(rec.ID), pool.CloneOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.cleanSpareLeftovers(ctx, []store.Sandbox{rec}); err != nil {
		t.Fatal(err)
	}
	if left := spareNames(t, s); len(left) != 0 {
		t.Fatalf("spares after the second cleanup: %v", left)
	}
}

// TestReconcileSetsDiskQuotasAgain: a root whose quota was lost (a crash
// of the machine before the file system committed the limit) has it
// again after the next daemon's Reconcile.
func TestReconcileSetsDiskQuotasAgain(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "q", DiskBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StopSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.SetQuota(ctx, datasetName(sb.ID), 0); err != nil { // what the crash lost
		t.Fatal(err)
	}
	next := New(s.opts)
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := next.StartSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.StopSandbox(context.Background(), tn, sb.ID) })
	out, code := sh(t, next, sb.ID, "dd if=/dev/zero of=/home/agent/big bs=1M count=100 conv=fsync 2>&1")
	if code == 0 || !strings.Contains(out, "quota") {
		t.Fatalf("100 MiB into a 64 MiB sandbox after a lost quota and a Reconcile: exit %d: %s", code, out)
	}
}

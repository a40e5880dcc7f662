package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// auditTape keeps the service's audit entries.
type auditTape struct {
	mu sync.Mutex
	es []audit.Entry
}

func (a *auditTape) Record(_ context.Context, e audit.Entry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.es = append(a.es, e)
	return nil
}

func (a *auditTape) actions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, e := range a.es {
		out = append(out, e.Action+" "+e.Outcome)
	}
	return out
}

// eventTape keeps the service's events by type.
type eventTape struct {
	mu sync.Mutex
	es []events.Event
}

func (t *eventTape) Emit(_ context.Context, e events.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.es = append(t.es, e)
}

func (t *eventTape) of(typ string) []events.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []events.Event
	for _, e := range t.es {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// keepCopy makes sandbox id's root a lost copy the way a node that lost
// its lease does (LeaseLost's keepLostCopy) and returns the copy's name.
func keepCopy(t *testing.T, s *Service, id string, epoch int64) string {
	t.Helper()
	ctx := context.Background()
	sb, err := s.opts.Store.GetSandbox(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	s.keepLostCopy(ctx, sb, epoch, "test: another node owns it now")
	name := strings.TrimPrefix(lostCopyDataset(epoch, id), "sandboxes/")
	if ok, _ := s.pool.Exists(ctx, "sandboxes/"+name); !ok {
		t.Fatalf("no lost copy %s kept", name)
	}
	return name
}

func TestLostCopyListRecoverDiscard(t *testing.T) {
	s := newService(t)
	tape, evs := &auditTape{}, &eventTape{}
	s.rec, s.opts.Events = tape, evs
	ctx := context.Background()
	tn := store.DefaultTenant
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "agent", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := sh(t, s, sb.ID, "echo after-the-push > /workspace/work.txt"); code != 0 {
		t.Fatalf("write: %s", out)
	}
	name := keepCopy(t, s, sb.ID, 7)
	if len(evs.of(events.SandboxLostCopy)) != 1 {
		t.Fatalf("events %+v", evs.es)
	}

	list, err := s.LostCopies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("lost copies %+v", list)
	}
	c := list[0]
	if c.Copy != name || c.Sandbox != sb.ID || c.SandboxName != "agent" || c.Tenant != tn || c.Epoch != 7 || c.SizeBytes <= 0 || c.KeptAt.IsZero() {
		t.Fatalf("lost copy %+v", c)
	}

	// Recover: a new sandbox, stopped, of the same tenant, holding the
	// copy's files; the copy stays.
	got, err := s.RecoverLostCopy(ctx, name, "agent-recovered")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID == sb.ID || got.Name != "agent-recovered" || got.State != string(store.StateStopped) || got.Labels["team"] != "a" {
		t.Fatalf("recovered %+v", got)
	}
	rec, err := s.opts.Store.GetSandbox(ctx, tn, got.ID)
	if err != nil || rec.TenantID != tn {
		t.Fatalf("record %+v %v", rec, err)
	}
	if _, err := s.StartSandbox(ctx, tn, got.ID); err != nil {
		t.Fatal(err)
	}
	if out, code := sh(t, s, got.ID, "cat /workspace/work.txt"); code != 0 || out != "after-the-push\n" {
		t.Fatalf("recovered file: %q %d", out, code)
	}
	if ok, _ := s.pool.Exists(ctx, "sandboxes/"+name); !ok {
		t.Fatal("recover removed the copy")
	}
	// A name taken is refused, and leaves nothing.
	if _, err := s.RecoverLostCopy(ctx, name, "agent-recovered"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("recover to a taken name: %v", err)
	}

	if err := s.DiscardLostCopy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.pool.Exists(ctx, "sandboxes/"+name); ok {
		t.Fatal("the copy is still there after discard")
	}
	if list, _ := s.LostCopies(ctx); len(list) != 0 {
		t.Fatalf("after discard: %+v", list)
	}
	if err := s.DiscardLostCopy(ctx, name); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("discard twice: %v", err)
	}
	// The recovered sandbox does not depend on the copy.
	if out, code := sh(t, s, got.ID, "cat /workspace/work.txt"); code != 0 || out != "after-the-push\n" {
		t.Fatalf("recovered file after discard: %q %d", out, code)
	}
	acts := tape.actions()
	for _, want := range []string{"sandbox.recover_lost_copy ok", "sandbox.discard_lost_copy ok"} {
		if !slices.Contains(acts, want) {
			t.Errorf("audit %q missing from %q", want, acts)
		}
	}
	if n := len(evs.of(events.SandboxLostCopyRecovered)); n != 1 {
		t.Errorf("%d recovered events", n)
	}
	if e := evs.of(events.SandboxLostCopyDiscarded); len(e) != 1 || e[0].Data["copy"] != name {
		t.Errorf("discarded events %+v", e)
	}
}

func TestLostCopyNamesOutsideThePoolAreRefused(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "keep", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.pool.List(ctx, "sandboxes")
	for _, name := range []string{"", "..", "../" + sb.ID, "lost-1-../../templates/host", "lost-1-a/b", "lost-x-" + sb.ID,
		"lost--" + sb.ID, "lost-01-" + sb.ID, sb.ID, "lost-1-", "/etc", "lost-1-a\x00b", "Lost-1-" + sb.ID} {
		if _, err := s.RecoverLostCopy(ctx, name, ""); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("recover %q: %v, want invalid", name, err)
		}
		if err := s.DiscardLostCopy(ctx, name); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("discard %q: %v, want invalid", name, err)
		}
	}
	// A well-formed name that is not here is not found.
	if err := s.DiscardLostCopy(ctx, "lost-1-"+sb.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("discard absent: %v", err)
	}
	after, _ := s.pool.List(ctx, "sandboxes")
	if !slices.Equal(before, after) {
		t.Fatalf("datasets changed: %v -> %v", before, after)
	}
}

// TestRecoverLostCopyDoesNotFollowItsSymlinks: a copy is a tree its agent
// controlled. Symlinks in it pointing at host paths stay symlinks in the
// recovered sandbox (a btrfs snapshot copies no file), listing its size
// opens nothing, and discarding it deletes the copy, not what its links
// point at.
func TestRecoverLostCopyDoesNotFollowItsSymlinks(t *testing.T) {
	s, _, _ := newBtrfsService(t, 2<<30, Options{})
	ctx := context.Background()
	tn := store.DefaultTenant
	host := t.TempDir()
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte("host-only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "hostile", DiskBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	plant := "cd /workspace && ln -s " + host + " hostdir && ln -s " + secret + " secret && ln -s / root && " +
		"ln -s /etc/shadow shadow && mkdir -p d && ln -s ../../../../../../" + host + " d/up"
	if out, code := sh(t, s, sb.ID, plant); code != 0 {
		t.Fatalf("plant: %s", out)
	}
	name := keepCopy(t, s, sb.ID, 2)
	if _, err := s.LostCopies(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.RecoverLostCopy(ctx, name, "")
	if err != nil {
		t.Fatal(err)
	}
	root := s.pool.Path(datasetName(got.ID))
	for link, target := range map[string]string{"workspace/hostdir": host, "workspace/secret": secret, "workspace/root": "/",
		"workspace/shadow": "/etc/shadow", "workspace/d/up": "../../../../../../" + host} {
		fi, err := os.Lstat(filepath.Join(root, link))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s in the recovered root: %v %v, want a symlink", link, fi, err)
			continue
		}
		if dst, _ := os.Readlink(filepath.Join(root, link)); dst != target {
			t.Errorf("%s -> %q, want %q", link, dst, target)
		}
	}
	// Inside the recovered sandbox the links resolve in its own root.
	if _, err := s.StartSandbox(ctx, tn, got.ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, s, got.ID, "cat /workspace/secret 2>&1; cat /workspace/hostdir/secret 2>&1"); strings.Contains(out, "host-only") {
		t.Fatalf("the recovered sandbox reads a host file: %q", out)
	}
	if err := s.DiscardLostCopy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host-only\n" {
		t.Fatalf("host file after discard: %q %v", b, err)
	}
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Fatalf("/etc/shadow: %v", err)
	}
}

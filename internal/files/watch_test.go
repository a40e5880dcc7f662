package files

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

// collect reads events until want have arrived (fails after 5 s) or,
// with want nil, for 300 ms.
func collect(t *testing.T, w *Watcher, until func([]WatchEvent) bool) []WatchEvent {
	t.Helper()
	var got []WatchEvent
	deadline := time.After(5 * time.Second)
	quiet := time.After(300 * time.Millisecond)
	for {
		if until != nil && until(got) {
			return got
		}
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-deadline:
			t.Fatalf("no expected event within 5 s; got %+v", got)
		case <-quiet:
			if until == nil {
				return got
			}
		}
	}
}

func has(evs []WatchEvent, name string, op WatchOp) bool {
	for _, e := range evs {
		if e.Name == name && e.Op == op {
			return true
		}
	}
	return false
}

func TestWatchReportsChangesRecursively(t *testing.T) {
	e := newEnv(t)
	must(t, os.MkdirAll(e.host("w/old"), 0o755))
	w, err := e.r.Watch("/w", true)
	must(t, err)
	defer w.Close()
	must(t, os.WriteFile(e.host("w/a.txt"), []byte("1"), 0o644))
	must(t, os.WriteFile(e.host("w/old/b.txt"), []byte("1"), 0o644))
	must(t, os.Mkdir(e.host("w/new"), 0o755))
	// A directory made after the start is watched too (give the watcher
	// the moment it takes to add it).
	collect(t, w, func(evs []WatchEvent) bool { return has(evs, "new", WatchCreate) })
	time.Sleep(50 * time.Millisecond)
	must(t, os.WriteFile(e.host("w/new/c.txt"), []byte("1"), 0o644))
	must(t, os.Chmod(e.host("w/a.txt"), 0o600))
	must(t, os.Rename(e.host("w/a.txt"), e.host("w/d.txt")))
	must(t, os.Remove(e.host("w/d.txt")))
	evs := collect(t, w, func(evs []WatchEvent) bool { return has(evs, "d.txt", WatchRemove) })
	for _, want := range []struct {
		name string
		op   WatchOp
	}{{"new/c.txt", WatchCreate}, {"a.txt", WatchChmod}, {"a.txt", WatchRename}, {"d.txt", WatchCreate}} {
		if !has(evs, want.name, want.op) {
			t.Errorf("no %v of %s in %+v", want.op, want.name, evs)
		}
	}

	// Not recursive: a change in a subdirectory is not reported.
	w2, err := e.r.Watch("/w", false)
	must(t, err)
	defer w2.Close()
	must(t, os.WriteFile(e.host("w/old/e.txt"), []byte("1"), 0o644))
	must(t, os.WriteFile(e.host("w/f.txt"), []byte("1"), 0o644))
	evs = collect(t, w2, func(evs []WatchEvent) bool { return has(evs, "f.txt", WatchCreate) })
	if has(evs, "old/e.txt", WatchCreate) {
		t.Fatalf("a non-recursive watcher reported a subdirectory: %+v", evs)
	}
}

// TestWatchReportsWhatANewDirectoryAlreadyHolds: a directory that comes
// with entries (a tree moved in at once, or files made in a new
// directory before the watcher has added it) has each of them reported
// as created, and is watched from then on.
func TestWatchReportsWhatANewDirectoryAlreadyHolds(t *testing.T) {
	e := newEnv(t)
	must(t, os.MkdirAll(e.host("w"), 0o755))
	must(t, os.MkdirAll(e.host("elsewhere/tree/deeper"), 0o755))
	must(t, os.WriteFile(e.host("elsewhere/tree/deeper/b.txt"), []byte("1"), 0o644))
	// The tree holds a symlink to a directory of the host's: reported as
	// an entry, never followed.
	outside := t.TempDir()
	must(t, os.Symlink(outside, e.host("elsewhere/tree/out")))
	w, err := e.r.Watch("/w", true)
	must(t, err)
	defer w.Close()
	must(t, os.Rename(e.host("elsewhere/tree"), e.host("w/tree")))
	evs := collect(t, w, func(evs []WatchEvent) bool { return has(evs, "tree/deeper/b.txt", WatchCreate) })
	if !has(evs, "tree", WatchCreate) || !has(evs, "tree/deeper", WatchCreate) || !has(evs, "tree/out", WatchCreate) {
		t.Fatalf("the moved tree's own creates: %+v", evs)
	}
	must(t, os.WriteFile(filepath.Join(outside, "host.txt"), []byte("1"), 0o644))
	must(t, os.WriteFile(e.host("w/tree/deeper/c.txt"), []byte("1"), 0o644))
	evs = collect(t, w, func(evs []WatchEvent) bool { return has(evs, "tree/deeper/c.txt", WatchCreate) })
	evs = append(evs, collect(t, w, nil)...)
	if has(evs, "tree/out/host.txt", WatchCreate) {
		t.Fatalf("a change outside the root was reported through a symlink: %+v", evs)
	}
}

// TestWatchNeverWatchesOutsideTheRoot: symlinks to the host, planted
// before the start or swapped in while watching, never make the watcher
// report a change outside the root.
func TestWatchNeverWatchesOutsideTheRoot(t *testing.T) {
	e := newEnv(t)
	e.plantHostile(t)
	// The watched path itself a symlink to a host directory: it resolves
	// inside the root, where there is no such directory.
	if w, err := e.r.Watch("/workspace/hostdir", true); err == nil {
		w.Close()
		t.Fatal("watching a symlink to a host directory was accepted")
	}
	w, err := e.r.Watch("/workspace", true)
	must(t, err)
	defer w.Close()
	// Swaps during the watch: a directory replaced by a symlink to the
	// host, and a new symlink to the host.
	must(t, os.Mkdir(e.host("workspace/sub"), 0o755))
	collect(t, w, func(evs []WatchEvent) bool { return has(evs, "sub", WatchCreate) })
	must(t, os.Rename(e.host("workspace/sub"), e.host("workspace/sub.old")))
	must(t, os.Symlink(e.outside, e.host("workspace/sub")))
	must(t, os.Symlink(e.outside, e.host("workspace/later")))
	collect(t, w, func(evs []WatchEvent) bool { return has(evs, "later", WatchCreate) })
	// A change outside the root: nothing reported.
	marker := filepath.Join(e.outside, "written-by-the-host")
	must(t, os.WriteFile(marker, []byte("x"), 0o644))
	defer os.Remove(marker)
	for _, ev := range collect(t, w, nil) {
		if filepath.Base(ev.Name) == "written-by-the-host" || ev.Name == "canary" {
			t.Fatalf("the watcher reported a change outside the root: %+v", ev)
		}
	}
}

func TestWatchRefusesAFileAndTooManyDirectories(t *testing.T) {
	e := newEnv(t)
	must(t, os.WriteFile(e.host("f"), []byte("x"), 0o644))
	if _, err := e.r.Watch("/f", false); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("watch a file: %v, want ErrInvalid", err)
	}
	if _, err := e.r.Watch("/nope", false); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("watch a missing directory: %v, want ErrNotFound", err)
	}
	for i := range MaxWatchDirs + 1 {
		must(t, os.MkdirAll(e.host(filepath.Join("many", string(rune('a'+i%26)), "d"+strconv.Itoa(i))), 0o755))
	}
	if _, err := e.r.Watch("/many", true); !errors.Is(err, errs.ErrTooLarge) {
		t.Fatalf("watch %d directories: %v, want ErrTooLarge", MaxWatchDirs+27, err)
	}
}

// TestWatchEndsWhenTheDirectoryGoes: removing the watched directory
// closes the events.
func TestWatchEndsWhenTheDirectoryGoes(t *testing.T) {
	e := newEnv(t)
	must(t, os.Mkdir(e.host("gone"), 0o755))
	w, err := e.r.Watch("/gone", true)
	must(t, err)
	defer w.Close()
	must(t, os.Remove(e.host("gone")))
	select {
	case _, ok := <-w.Events():
		for ok {
			_, ok = <-w.Events()
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the events did not end when the watched directory was removed")
	}
	e.checkOutside(t)
}

package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/testutil"
	"github.com/stead-dev/stead/internal/treedigest"
)

// writeSize makes a file of n bytes of data (allocated, not sparse).
func writeSize(t testing.TB, p string, n int) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o644))
}

func TestDiskUsageNamesWhereTheSpaceWent(t *testing.T) {
	e := newEnv(t)
	writeSize(t, e.host("workspace/node_modules/big/blob.bin"), 3<<20)
	writeSize(t, e.host("workspace/src/main.go"), 10<<10)
	writeSize(t, e.host("var/log/agent.log"), 1<<20)
	for i := range 50 {
		writeSize(t, e.host(fmt.Sprintf("var/cache/c%02d", i)), 8<<10)
	}
	// A hard link is counted once; a symlink to the host's big canary
	// directory is one small entry, never followed.
	must(t, os.Link(e.host("var/log/agent.log"), e.host("workspace/agent.log.hardlink")))
	writeSize(t, filepath.Join(e.outside, "huge"), 8<<20)
	e.resnap(t)
	must(t, os.Symlink(e.outside, e.host("workspace/host")))
	must(t, os.Symlink("/", e.host("root-link")))

	u, err := e.r.DiskUsage(context.Background(), "/", UsageOptions{Top: 3})
	must(t, err)
	if u.Bytes < 4<<20 || u.Bytes > 6<<20 {
		t.Fatalf("total %d bytes, want about 4.5 MiB (the host's 8 MiB never counted, the hard link once)", u.Bytes)
	}
	if u.Files != 2+1+50+2 || u.Skipped != 0 {
		t.Errorf("files %d (want 55: the hard link once, symlinks counted), skipped %d", u.Files, u.Skipped)
	}
	if len(u.Children) != 3 || u.Children[0].Path != "/workspace" || u.Children[1].Path != "/var" {
		t.Errorf("children %+v, want /workspace then /var first, 3 at most", u.Children)
	}
	// The hard-linked file is named by whichever of its paths the walk
	// met first.
	if len(u.LargestFiles) != 3 || u.LargestFiles[0].Path != "/workspace/node_modules/big/blob.bin" ||
		(u.LargestFiles[1].Path != "/var/log/agent.log" && u.LargestFiles[1].Path != "/workspace/agent.log.hardlink") {
		t.Errorf("largest files %+v", u.LargestFiles)
	}
	if len(u.LargestDirs) == 0 || u.LargestDirs[0].Path != "/workspace/node_modules/big" {
		t.Errorf("largest dirs %+v, want /workspace/node_modules/big first", u.LargestDirs)
	}
	if p := u.LargestDirs[1].Path; p != "/var/log" && p != "/var/cache" && p != "/workspace" {
		t.Errorf("second largest dir %+v", u.LargestDirs[1])
	}

	// A sub-path; a file; a symlink (itself, not its target).
	sub, err := e.r.DiskUsage(context.Background(), "/var", UsageOptions{})
	must(t, err)
	if sub.Path != "/var" || sub.Files != 51 || len(sub.Children) != 2 {
		t.Errorf("/var: %+v", sub)
	}
	f, err := e.r.DiskUsage(context.Background(), "/var/log/agent.log", UsageOptions{})
	must(t, err)
	if f.Files != 1 || f.Bytes < 1<<20 || len(f.LargestFiles) != 1 {
		t.Errorf("a file: %+v", f)
	}
	l, err := e.r.DiskUsage(context.Background(), "/workspace/host", UsageOptions{})
	must(t, err)
	if l.Files != 1 || l.Bytes > 64<<10 || len(l.LargestFiles) != 0 {
		t.Errorf("a symlink to the host: %+v, want the link alone", l)
	}
	// Through a symlinked parent, resolved inside the root.
	if _, err := e.r.DiskUsage(context.Background(), "/root-link/var/log", UsageOptions{}); err != nil {
		t.Errorf("a path through a symlink to / (inside the root): %v", err)
	}

	for _, bad := range []struct {
		p   string
		top int
		err error
	}{{"/missing", 0, errs.ErrNotFound}, {"relative", 0, errs.ErrInvalid}, {"/", -1, errs.ErrInvalid}, {"/", 5000, errs.ErrInvalid}} {
		if _, err := e.r.DiskUsage(context.Background(), bad.p, UsageOptions{Top: bad.top}); !errors.Is(err, bad.err) {
			t.Errorf("DiskUsage(%q, top %d): %v, want %v", bad.p, bad.top, err, bad.err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.r.DiskUsage(ctx, "/", UsageOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled walk: %v", err)
	}
	e.checkOutside(t)
}

// resnap takes the digest of outside/ again, after the test put more there.
func (e *env) resnap(t testing.TB) {
	t.Helper()
	var err error
	e.snap, err = treedigest.Digest(context.Background(), e.outside, treedigest.Options{})
	must(t, err)
}

// TestDiskUsageNeverCountsTheHostUnderASymlinkSwap: the sandbox swaps a
// directory for a symlink to a host directory holding 64 MiB while the
// walks run; no walk ever counts a byte of it.
func TestDiskUsageNeverCountsTheHostUnderASymlinkSwap(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	writeSize(t, filepath.Join(e.outside, "huge"), 64<<20)
	e.resnap(t)
	for i := range 20 {
		writeSize(t, e.host(fmt.Sprintf("work/d/sub%d/f", i)), 4<<10)
	}
	must(t, os.Symlink(e.outside, e.host("work/abs")))
	must(t, os.Symlink("../../outside", e.host("work/rel")))
	swaps := adversary(func(i int) int64 {
		other := e.host("work/abs")
		if i%2 == 1 {
			other = e.host("work/rel")
		}
		if unix.Renameat2(unix.AT_FDCWD, e.host("work/d"), unix.AT_FDCWD, other, unix.RENAME_EXCHANGE) == nil {
			return 1
		}
		return 0
	})
	deadline := time.Now().Add(2 * time.Second)
	walks := 0
	for time.Now().Before(deadline) || walks < 200 {
		for _, p := range []string{"/", "/work", "/work/d"} {
			u, err := e.r.DiskUsage(context.Background(), p, UsageOptions{})
			if err != nil {
				continue // /work/d was a symlink to outside the root at that moment
			}
			if u.Bytes >= 32<<20 {
				t.Fatalf("a walk of %s counted %d bytes: it followed the swapped symlink to the host", p, u.Bytes)
			}
			for _, f := range u.LargestFiles {
				if strings.Contains(f.Path, "huge") {
					t.Fatalf("a walk of %s names the host's file %s", p, f.Path)
				}
			}
		}
		walks++
	}
	if n := swaps(); n < 100 {
		t.Fatalf("only %d swaps: the race was not exercised", n)
	}
	e.checkOutside(t)
}

// BenchmarkDiskUsage walks a 23,000-file tree (the size).
func BenchmarkDiskUsage(b *testing.B) {
	e := newEnv(b)
	for d := range 230 {
		dir := e.host(fmt.Sprintf("w/m%d/p%d", d%17, d))
		must(b, os.MkdirAll(dir, 0o755))
		for f := range 100 {
			must(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), []byte("x"), 0o644))
		}
	}
	b.ResetTimer()
	for range b.N {
		u, err := e.r.DiskUsage(context.Background(), "/", UsageOptions{})
		if err != nil || u.Files != 23000 {
			b.Fatalf("%d files, %v", u.Files, err)
		}
	}
}

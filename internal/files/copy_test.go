package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/testutil"
	"github.com/stead-dev/stead/internal/treedigest"
)

// TestCopyTreeIsFaithful: a copy keeps data (sparse files sparse), modes
// with setuid bits, owners, times, xattrs, symlinks, hard links and FIFOs.
func TestCopyTreeIsFaithful(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	src := e.host("tree")
	buildRichTree(t, src)
	dst := t.TempDir()
	pfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(pfd)
	must(t, e.r.CopyTree(context.Background(), "/tree", pfd, "copy"))
	opts := treedigest.Options{}
	want, err := treedigest.Entries(context.Background(), src, opts)
	must(t, err)
	got, err := treedigest.Entries(context.Background(), filepath.Join(dst, "copy"), opts)
	must(t, err)
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("copy differs:\nwant\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	if err := e.r.CopyTree(context.Background(), "/tree", pfd, "copy"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("copy onto an existing name: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if err := e.r.CopyTree(context.Background(), "/tree", pfd, bad); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("destination name %q: %v", bad, err)
		}
	}
}

// TestCopyTreeUnderSymlinkSwapsNeverLeavesEitherTree: while "the sandbox"
// exchanges a directory of the source, and the copy's own directories,
// with symlinks to a host directory as fast as it can, copies never read
// or write outside.
func TestCopyTreeUnderSymlinkSwapsNeverLeavesEitherTree(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	for i := range 20 {
		must(t, os.MkdirAll(e.host(fmt.Sprintf("src/d/sub%d", i)), 0o755))
		must(t, os.WriteFile(e.host(fmt.Sprintf("src/d/sub%d/f", i)), []byte("data"), 0o644))
	}
	must(t, os.Symlink(e.outside, e.host("src/evil")))
	must(t, os.MkdirAll(e.host("dst"), 0o755))
	dfd, err := unix.Open(e.host("dst"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(dfd)
	swaps := adversary(func(i int) (n int64) {
		if unix.Renameat2(unix.AT_FDCWD, e.host("src/d"), unix.AT_FDCWD, e.host("src/evil"), unix.RENAME_EXCHANGE) == nil {
			n++
		}
		// The copy being made: its subdirectories for host links.
		c := e.host(fmt.Sprintf("dst/c%d/sub%d", i%50, i%20))
		if os.Rename(c, c+".x") == nil {
			os.Symlink(e.outside, c)
			n++
		}
		return n
	})
	copied := 0
	for i := range 200 {
		if e.r.CopyTree(context.Background(), "/src/d", dfd, fmt.Sprintf("c%d", i%50)) == nil {
			copied++
		}
		RemoveAt(dfd, fmt.Sprintf("c%d", i%50))
	}
	n := swaps()
	t.Logf("%d swaps, %d copies made", n, copied)
	if n < 100 {
		t.Fatalf("only %d swaps: the race was not exercised", n)
	}
	e.checkOutside(t)
}

// TestAsUserActsWithTheUsersPermissions: inside AsUser, a root-only file
// cannot be read nor a root-owned directory written, and what is made is
// owned by the user; afterwards the daemon is root again.
func TestAsUserActsWithTheUsersPermissions(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(t)
	must(t, os.WriteFile(e.host("secret"), []byte("root only"), 0o600))
	must(t, os.MkdirAll(e.host("home"), 0o755))
	must(t, os.Chown(e.host("home"), 1000, 1000))
	err := AsUser(1000, 1000, func() error {
		if _, _, err := e.r.ReadFile("/secret"); !errors.Is(err, errs.ErrForbidden) {
			return fmt.Errorf("read a root-only file: %v", err)
		}
		if err := e.r.Mkdir("/rootdir", false, 1000, 1000); !errors.Is(err, errs.ErrForbidden) {
			return fmt.Errorf("made a directory in root's: %v", err)
		}
		return e.r.WriteFile(context.Background(), "/home/f", 0o644, -1, -1, strings.NewReader("mine"))
	})
	must(t, err)
	var st unix.Stat_t
	must(t, unix.Stat(e.host("home/f"), &st))
	if st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("file made as the user is owned by %d:%d", st.Uid, st.Gid)
	}
	if _, _, err := e.r.ReadFile("/secret"); err != nil {
		t.Fatalf("after AsUser the daemon lost root: %v", err)
	}
}

// adversary runs swap(i) for i = 0, 1, ... in a goroutine, as fast as it
// can, the way a sandbox would race the daemon; the returned stop ends it
// and tells how many swaps (the sum of swap's results) were made.
func adversary(swap func(i int) int64) (stop func() int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			swaps.Add(swap(i))
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return swaps.Load()
	}
}

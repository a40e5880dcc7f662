package agentlog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/testutil"
)

// openDir opens dir as the writer and reader get it.
func openDir(t testing.TB, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func newWriter(t testing.TB, dir string, cfg Config, now func() time.Time) *Writer {
	t.Helper()
	fd := openDir(t, dir)
	defer unix.Close(fd)
	w, err := OpenWriter(fd, cfg, WriterOptions{Now: now, UID: -1})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// logFiles sums the sizes of agent.log* (the temporary file of a
// compression excluded) and lists their names.
func logFiles(t testing.TB, dir string) (int64, []string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var names []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), Name) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		total += fi.Size()
		names = append(names, e.Name())
	}
	return total, names
}

// readAll returns the whole log as a Reader gives it.
func readAll(t testing.TB, dir string, opts ReadOptions) []byte {
	t.Helper()
	r, err := Open(t.Context(), openDir(t, dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// numbered is line i of the tests' logs.
func numbered(i int) string { return fmt.Sprintf("line %08d %s\n", i, strings.Repeat("x", i%97)) }

// checkNumbered checks that b holds lines first..last-1, each once, in
// order, and nothing else.
func checkNumbered(t testing.TB, b []byte, first, last int) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	want := first
	for sc.Scan() {
		if got := sc.Text() + "\n"; got != numbered(want) {
			t.Fatalf("line %d: got %.40q, want %.40q", want, got, numbered(want))
		}
		want++
	}
	if want != last {
		t.Fatalf("read lines %d..%d, want up to %d", first, want, last)
	}
}

func TestWriterRotatesAtLineBoundariesWithinTheBound(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{MaxSize: 256 << 10, Keep: 3}
	w := newWriter(t, dir, cfg, nil)
	const lines = 60000 // ~3.6 MiB: many rotations, the oldest dropped
	var batch []byte
	for i := range lines {
		batch = append(batch, numbered(i)...)
		if len(batch) > 3000 || i == lines-1 {
			w.Write(batch)
			batch = batch[:0]
			// gzip's overhead on this text is negative; allow one
			// compression's temporary file besides.
			if total, names := logFiles(t, dir); total > cfg.MaxSize*int64(cfg.Keep+1) {
				t.Fatalf("after line %d the log takes %d bytes > %d: %v", i, total, cfg.MaxSize*int64(cfg.Keep+1), names)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, names := logFiles(t, dir)
	want := []string{"agent.log", "agent.log.1.gz", "agent.log.2.gz", "agent.log.3.gz"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", names, want)
	}
	// Every file holds whole lines and at most MaxSize bytes.
	var first int
	for i, n := range []string{"agent.log.3.gz", "agent.log.2.gz", "agent.log.1.gz", "agent.log"} {
		b := fileContent(t, filepath.Join(dir, n))
		if int64(len(b)) > cfg.MaxSize || len(b) == 0 || b[len(b)-1] != '\n' {
			t.Fatalf("%s: %d bytes, ends %q", n, len(b), b[max(len(b)-5, 0):])
		}
		if i == 0 {
			first, _ = strconv.Atoi(string(b[5:13]))
		}
	}
	// Reading gives the kept lines, in order, seamlessly.
	checkNumbered(t, readAll(t, dir, ReadOptions{}), first, lines)
	if first == 0 {
		t.Fatal("the oldest file was never dropped")
	}
}

// fileContent reads a log file, decompressing a .gz one.
func fileContent(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(p, ".gz") {
		return b
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return out
}

func TestWriterSplitsLongLinesAtTheCapWithoutLosingBytes(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, dir, Config{MaxSize: 128 << 10, Keep: 5}, nil)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Pump(pr, w, 20*time.Millisecond) }()
	long := bytes.Repeat([]byte("0123456789"), 30000) // 300 kB, no newline
	var want []byte
	want = append(want, "short\n"...)
	want = append(want, long...)
	want = append(want, "\nafter\nprompt> "...)
	pw.Write(want)
	// The prompt is written after the idle time, without a newline.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := readAll(t, dir, ReadOptions{})
		if bytes.HasSuffix(got, []byte("prompt> ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the prompt without a newline was held back: ends %q", got[max(len(got)-20, 0):])
		}
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got := readAll(t, dir, ReadOptions{}); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, verbatim", len(got), len(want))
	}
	cur := fileContent(t, filepath.Join(dir, "agent.log"))
	if len(cur) > 128<<10 {
		t.Fatalf("agent.log has %d bytes", len(cur))
	}
}

func TestWriterNeverFollowsPlantedSymlinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(victim, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"agent.log", "agent.log.1", "agent.log.2.gz", ".agent.log.idx", ".agent.log.1.gz.tmp", ".agent.log.1.idx"} {
		if err := os.Symlink(victim, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 3}, nil)
	for i := range 20000 {
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	if b, _ := os.ReadFile(victim); string(b) != "secret\n" {
		t.Fatalf("the symlinks' target changed: %q", b)
	}
	st, err := os.Stat(victim)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("target: %v %v", st, err)
	}
	// Only regular files are read back, and never the target.
	r, err := Open(t.Context(), openDir(t, dir), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if bytes.Contains(b, []byte("secret")) {
		t.Fatal("the reader followed a symlink")
	}
}

func TestWriterKeepsThePipeDrainedOnAFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	// Fill the disk but for a little.
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k", "count=240").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 2}, nil)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Pump(pr, w, 0) }()
	// The service writes far more than fits; it must never block.
	start := time.Now()
	line := []byte(strings.Repeat("y", 99) + "\n")
	for i := 0; i < 100000; i++ {
		pw.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := pw.Write(line); err != nil {
			t.Fatalf("the service blocked on its log: %v", err)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("writing took %s", d)
	}
	// Let the pump catch up, then free space: the next line brings a marker.
	time.Sleep(200 * time.Millisecond)
	if w.Dropped() == 0 {
		t.Fatal("nothing was dropped on a full disk")
	}
	os.Remove(filler)
	pw.Write([]byte("back\n"))
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.Close()
	got := readAll(t, dir, ReadOptions{})
	if !bytes.Contains(got, []byte("bytes of the service's output were dropped")) || !bytes.HasSuffix(got, []byte("back\n")) {
		t.Fatalf("no marker or no line after it: ends %q", got[max(len(got)-200, 0):])
	}
}

func TestWriterResumesAfterARestartAndFinishesACompression(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 4}, nil)
	for i := range 3000 {
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	// A crash between the rotation and the end of its compression.
	if err := os.Rename(filepath.Join(dir, "agent.log.1.gz"), filepath.Join(dir, "x.gz")); err != nil {
		t.Fatal(err)
	}
	plain := fileContent(t, filepath.Join(dir, "x.gz"))
	os.Remove(filepath.Join(dir, "x.gz"))
	if err := os.WriteFile(filepath.Join(dir, "agent.log.1"), plain, 0o644); err != nil {
		t.Fatal(err)
	}
	w = newWriter(t, dir, Config{MaxSize: LineCap, Keep: 4}, nil)
	for i := 3000; i < 4000; i++ {
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	if _, err := os.Stat(filepath.Join(dir, "agent.log.1")); err == nil {
		t.Fatal("the interrupted compression was not finished")
	}
	b := readAll(t, dir, ReadOptions{})
	first, _ := strconv.Atoi(string(b[5:13]))
	checkNumbered(t, b, first, 4000)
}

package agentlog

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeClock is a settable clock.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.Unix(c.t.Load(), 0) }
func (c *fakeClock) set(sec int64)  { c.t.Store(sec) }
func newClock(sec int64) *fakeClock { c := &fakeClock{}; c.set(sec); return c }
func lineNo(s string) (int, error)  { return strconv.Atoi(s[5:13]) }
func since(sec int64) time.Time     { return time.Unix(sec, 0) }

// base is the fake clock's start: later than the files' real write times
// (an hour gives slow test runs room), as a clock that moves on would be.
var base = time.Now().Unix() + 3600

func secondOf(i, perSecond int) int64 { return base + int64(i/perSecond) }
func fileNamed(dir, n string) string  { return filepath.Join(dir, n) }
func touch(t *testing.T, p string, sec int64) {
	t.Helper()
	if err := os.Chtimes(p, since(sec), since(sec)); err != nil {
		t.Fatal(err)
	}
}

func TestReaderSinceSelectsByIndexAcrossRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	clk := newClock(secondOf(0, 100))
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 10}, clk.now)
	const lines = 6000 // 100 lines a second, 60 seconds, several files
	for i := range lines {
		clk.set(secondOf(i, 100))
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	for _, from := range []int{0, 1, 250, 3000, 5999} {
		sec := secondOf(from, 100)
		b := readAll(t, dir, ReadOptions{Since: since(sec)})
		// Exact to the second: the first line is the first of its second
		// (the index records are at least MaxSize/MaxRecords bytes apart,
		// less than a second of this output).
		want := (from / 100) * 100
		checkNumbered(t, b, want, lines)
	}
	if b := readAll(t, dir, ReadOptions{Since: since(secondOf(lines+500, 100))}); len(b) != 0 {
		t.Fatalf("since after the last write gave %d bytes", len(b))
	}
}

func TestReaderSinceFallsBackToWholeFilesWithoutAnIndex(t *testing.T) {
	dir := t.TempDir()
	clk := newClock(secondOf(0, 100))
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 10}, clk.now)
	for i := range 3000 {
		clk.set(secondOf(i, 100))
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	// Corrupt every index; files keep their write times.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".idx" {
			os.WriteFile(fileNamed(dir, e.Name()), []byte("garbage\n1 2\n"), 0o644)
		}
	}
	touch(t, fileNamed(dir, "agent.log"), secondOf(2999, 100))
	full := readAll(t, dir, ReadOptions{})
	got := readAll(t, dir, ReadOptions{Since: since(secondOf(2999, 100))})
	// The compressed files carry their plain file's write time (the
	// time of compression here, which is now): the whole log comes back,
	// never less.
	if len(got) == 0 || len(got) > len(full) {
		t.Fatalf("since without an index: %d bytes of %d", len(got), len(full))
	}
	first, err := lineNo(string(got))
	if err != nil {
		t.Fatal(err)
	}
	checkNumbered(t, got, first, 3000)
}

func TestReaderFollowAcrossConcurrentRotationsLosesNothing(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 8}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := Open(ctx, openDir(t, dir), ReadOptions{Follow: true, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const lines = 100000 // ~8 MB through 64 KiB files: >100 rotations
	go func() {
		var batch []byte
		for i := range lines {
			batch = append(batch, numbered(i)...)
			if len(batch) > 8000 || i == lines-1 {
				w.Write(batch)
				batch = batch[:0]
				if i%40000 < 100 {
					time.Sleep(10 * time.Millisecond) // let the reader catch up now and then
				}
			}
		}
	}()
	sc := bufio.NewScanner(r)
	next := 0
	for next < lines && sc.Scan() {
		if got := sc.Text() + "\n"; got != numbered(next) {
			t.Fatalf("line %d: got %.40q", next, got)
		}
		next++
	}
	if next != lines {
		t.Fatalf("followed %d lines of %d: %v", next, lines, sc.Err())
	}
	cancel()
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after the end of the follow: %v", err)
	}
	w.Close()
}

func TestReaderNeverFollowsASymlinkSwappedDuringReads(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "shadow")
	os.WriteFile(secret, []byte("root:SECRET-HASH\n"), 0o600)
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 3}, nil)
	for i := range 5000 {
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	// The adversary swaps agent.log.1 and agent.log.2.gz between a real
	// file and a symlink to a host file, as fast as it can.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range []string{"agent.log.1", "agent.log.2.gz", "agent.log"} {
				p := fileNamed(dir, n)
				tmp := p + ".swap"
				os.Remove(tmp)
				if i%2 == 0 {
					os.Symlink(secret, tmp)
				} else {
					os.WriteFile(tmp, []byte("plain\n"), 0o644)
				}
				os.Rename(tmp, p)
			}
		}
	}()
	for range 300 {
		r, err := Open(t.Context(), openDir(t, dir), ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := readerBytes(r)
		r.Close()
		if containsSecret(b) {
			close(stop)
			<-done
			t.Fatal("the reader read through a planted symlink")
		}
	}
	close(stop)
	<-done
}

func readerBytes(r *Reader) ([]byte, error) {
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

func containsSecret(b []byte) bool {
	for i := 0; i+6 <= len(b); i++ {
		if string(b[i:i+6]) == "SECRET" {
			return true
		}
	}
	return false
}

// TestSlowFollowerFarBehindTheWriterLosesNothing: the writer runs at full
// speed through many more rotations than it keeps files (keep 2) while
// the follower reads slowly; the follower holds the files rotated since it
// last looked, so every line arrives once, in order, although the writer
// dropped those files long before the follower read them.
func TestSlowFollowerFarBehindTheWriterLosesNothing(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 4}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := Open(ctx, openDir(t, dir), ReadOptions{Follow: true, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const lines = 60000 // ~5 MB through 64 KiB files: ~75 rotations, 4 kept
	done := make(chan struct{})
	go func() {
		defer close(done)
		var batch []byte
		for i := range lines {
			batch = append(batch, numbered(i)...)
			if len(batch) > 8000 || i == lines-1 {
				w.Write(batch)
				batch = batch[:0]
				// An agent's pace, not a tight loop: at most about one
				// rotation per 8 ms, so that the follower's holder (every
				// holdEvery) sees each file before Keep more rotations
				// drop it, on an idle machine too. The test is about a
				// reader many rotations behind, not a writer faster than
				// the holder's tick.
				time.Sleep(time.Millisecond)
			}
		}
	}()
	// A slow reader: small reads with a pause now and then, slower than
	// the writer (it ends tens of rotations behind).
	br := bufio.NewReaderSize(r, 4096)
	next := 0
	for next < lines {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after line %d: %v", next, err)
		}
		if line != numbered(next) {
			t.Fatalf("line %d: got %.40q: a rotated file was lost", next, line)
		}
		next++
		if next%500 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	<-done
	w.Close()
}

// A reader lists the files of one moment: a rotation that would run while
// it opens them (here, one in every listing) waits for the listing to end.
// Without the lock, every attempt of the listing sees a rotation, and the
// list it settles for misses the file that was current when it began.
func TestReaderListsTheFilesOfOneMoment(t *testing.T) {
	// The daemon's descriptor of the directory is O_RDONLY; an O_PATH one
	// (no flock on it) makes the reader open the directory again.
	for _, flags := range []int{unix.O_RDONLY, unix.O_PATH} {
		t.Run(map[int]string{unix.O_RDONLY: "ReadOnly", unix.O_PATH: "OPath"}[flags], func(t *testing.T) {
			readsFilesOfOneMoment(t, flags)
		})
	}
}

func readsFilesOfOneMoment(t *testing.T, flags int) {
	dir := t.TempDir()
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 8}, nil)
	defer w.Close()
	next := 0
	writeFile := func() { // a file's worth of lines: at least one rotation
		for size := 0; size < LineCap+1; next++ {
			l := numbered(next)
			w.Write([]byte(l))
			size += len(l)
		}
	}
	for range 4 {
		writeFile()
	}
	var rotations sync.WaitGroup
	opts := ReadOptions{scanned: func() {
		rotations.Add(1)
		done := make(chan struct{})
		go func() {
			defer rotations.Done()
			defer close(done)
			writeFile()
		}()
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
		}
	}}
	dfd, err := unix.Open(dir, flags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(t.Context(), dfd, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rotations.Wait()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1]
	if len(lines) == 0 {
		t.Fatal("read nothing")
	}
	first, err := strconv.Atoi(strings.Fields(lines[0])[1])
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		if l != numbered(first+i) {
			t.Fatalf("line %d of the read is %.20q, want line %d: a gap or a file out of order", i, l, first+i)
		}
	}
}

// The agent can take the lock of its log directory and keep it: the
// writer still rotates (waiting at most a second each time) and a reader
// still reads, in order.
func TestAnAgentHoldingTheLogDirectoryLockStallsNeither(t *testing.T) {
	dir := t.TempDir()
	agent := openDir(t, dir)
	defer unix.Close(agent)
	if err := unix.Flock(agent, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	follower, err := Open(ctx, openDir(t, dir), ReadOptions{Follow: true, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	w := newWriter(t, dir, Config{MaxSize: LineCap, Keep: 3}, nil)
	const lines = 3000 // about three files: two rotations
	began := time.Now()
	for i := range lines {
		w.Write([]byte(numbered(i)))
	}
	w.Close()
	// Each rotation waits writerLockWait at most: not forever.
	if d := time.Since(began); d > 15*time.Second {
		t.Fatalf("writing three files with the lock held by the agent took %v", d)
	}
	r, err := Open(t.Context(), openDir(t, dir), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	checkNumbered(t, b, 0, lines)
	// The follower, too, read every line in order.
	sc := bufio.NewScanner(follower)
	for i := range lines {
		if !sc.Scan() {
			t.Fatalf("follower ended at line %d: %v", i, sc.Err())
		}
		if got := sc.Text() + "\n"; got != numbered(i) {
			t.Fatalf("follower line %d: %.30q", i, got)
		}
	}
}

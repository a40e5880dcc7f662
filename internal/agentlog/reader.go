package agentlog

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPoll is how often a following Reader at the end of the log looks
// for new output.
const DefaultPoll = 100 * time.Millisecond

// ReadOptions select what a Reader returns.
type ReadOptions struct {
	// Name is the current file's name (default Name).
	Name string
	// Since skips what was written before it (to about a second; see the
	// package doc). Zero reads everything kept.
	Since time.Time
	// Follow keeps reading new output, across rotations, until the
	// context ends; without it the Reader ends at the current file's end.
	Follow bool
	// Poll is how often a follower looks for new output (DefaultPoll).
	Poll time.Duration

	// scanned, for tests, runs in each listing of the files after the
	// first rotated file was opened.
	scanned func()
}

// source is one file of the log being read.
type source struct {
	f     *os.File
	r     io.Reader // f, or a gzip reader of it
	id    uint64    // the plain file's fileID
	ino   uint64    // a live file's inode
	mtime int64     // unix second of the last write
	n     int       // rotated number; 0 for the current file
	skip  int64     // bytes to skip before reading
	live  bool      // the current file, still written to
	pos   int64     // offset reached
	size  int64     // size when opened
}

func (s *source) close() { s.f.Close() }

// Reader reads a rotating log oldest file first, decompressing rotated
// files; see the package doc for following. Every file is opened relative
// to the log's directory without following a symlink, and only regular
// files are read. A Reader is for one goroutine.
type Reader struct {
	ctx context.Context
	dir int
	// lock is the descriptor the directory's flock is taken on: dir, or
	// dir opened again when dir is O_PATH (flock needs an open file); -1
	// without. lockBusy is until when listings do not wait for it: the
	// agent was holding it.
	lock     int
	lockBusy time.Time
	name     string
	opts     ReadOptions
	queue    []*source
	cur      *source
	// A follower's holder goroutine (hold) and Read share queue and seen
	// under mu; seen holds the identity of every file queued or read.
	mu      sync.Mutex
	seen    map[uint64]bool
	holdErr error
	stop    chan struct{}
	stopped chan struct{}
}

// holdEvery is how often a follower opens the files rotated since it last
// looked, from a goroutine of its own. It holds them open, so the writer
// dropping the oldest (keep) cannot take output the follower has not read
// yet: a follower loses nothing however far behind it falls (its reads
// may wait on a slow client), as long as the writer does not rotate keep
// times within holdEvery (at 64 MiB files and keep 4, 25 GB/s).
const holdEvery = 10 * time.Millisecond

// Open starts reading the log in the directory dirfd, which the Reader
// takes over (Close closes it). ctx bounds a follow.
func Open(ctx context.Context, dirfd int, opts ReadOptions) (*Reader, error) {
	if opts.Name == "" {
		opts.Name = Name
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	r := &Reader{ctx: ctx, dir: dirfd, lock: -1, name: opts.Name, opts: opts}
	if fl, err := unix.FcntlInt(uintptr(dirfd), unix.F_GETFL, 0); err == nil && fl&unix.O_PATH == 0 {
		r.lock = dirfd
	} else if fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		r.lock = fd
	}
	rot, cur, err := r.snapshot()
	if err != nil {
		r.Close()
		return nil, err
	}
	all := rot
	if cur != nil {
		all = append(all, cur)
	}
	if !opts.Since.IsZero() {
		all = r.since(all, opts.Since.Unix())
	}
	r.queue = all
	if opts.Follow {
		r.seen = map[uint64]bool{}
		for _, s := range rot {
			r.seen[s.id] = true
		}
		if cur != nil {
			r.seen[cur.id] = true
		}
		r.stop, r.stopped = make(chan struct{}), make(chan struct{})
		go r.holder()
	}
	return r, nil
}

// holder runs hold every holdEvery until the read ends.
func (r *Reader) holder() {
	defer close(r.stopped)
	t := time.NewTicker(holdEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.mu.Lock()
			if err := r.hold(); err != nil && r.holdErr == nil {
				r.holdErr = err
			}
			r.mu.Unlock()
		}
	}
}

// hold queues, held open, the files the follower has not seen: rotated
// files (oldest first) and a new current file. Call with mu held.
func (r *Reader) hold() error {
	rot, cur, err := r.snapshot()
	if err != nil {
		return err
	}
	if cur != nil {
		rot = append(rot, cur)
	}
	for _, s := range rot {
		if r.seen[s.id] {
			s.close()
			continue
		}
		r.seen[s.id] = true
		r.queue = append(r.queue, s)
	}
	return nil
}

// since drops the files written wholly before the unix second t and sets
// where the first remaining one starts.
func (r *Reader) since(all []*source, t int64) []*source {
	for i, s := range all {
		off, want := r.startOffset(s, t)
		if !want {
			if s.live {
				// Follow only what comes after its present end.
				s.skip = s.size
				for _, o := range all[:i] {
					o.close()
				}
				return all[i:]
			}
			continue
		}
		s.skip = off
		for _, o := range all[:i] {
			o.close()
		}
		return all[i:]
	}
	for _, o := range all {
		o.close()
	}
	return nil
}

// startOffset consults the file's index (or its write time without one).
func (r *Reader) startOffset(s *source, t int64) (int64, bool) {
	ifd, _, err := openRegular(r.dir, indexName(r.name, s.n), unix.O_RDONLY)
	if err == nil {
		ix, perr := ParseIndex(readSome(ifd, maxIndexBytes))
		unix.Close(ifd)
		if perr == nil && ix.ID == s.id {
			return ix.startOffset(t, s.mtime)
		}
	}
	return 0, s.mtime >= t
}

// Read implements io.Reader. A follower blocks until there is output or
// its context ends (then it returns the context's error).
func (r *Reader) Read(p []byte) (int, error) {
	for {
		if r.cur == nil {
			r.mu.Lock()
			if len(r.queue) > 0 {
				r.cur, r.queue = r.queue[0], r.queue[1:]
				r.mu.Unlock()
				continue
			}
			if !r.opts.Follow {
				r.mu.Unlock()
				return 0, io.EOF
			}
			err := r.holdErr
			if err == nil {
				err = r.hold()
			}
			empty := len(r.queue) == 0
			r.mu.Unlock()
			if err != nil {
				return 0, err
			}
			if empty {
				if err := r.sleep(); err != nil {
					return 0, err
				}
			}
			continue
		}
		c := r.cur
		if c.skip > 0 {
			if err := skip(c); err != nil {
				return 0, fmt.Errorf("read agent log: %w", err)
			}
		}
		n, err := c.r.Read(p)
		c.pos += int64(n)
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) && !c.live {
			// A damaged rotated file: go on with the next one.
			err = io.EOF
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("read agent log: %w", err)
		}
		if !c.live || !r.opts.Follow {
			c.close()
			r.cur = nil
			continue
		}
		if r.renamed(c) {
			// Complete now: read it to its end, then what came after.
			c.live = false
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(int(c.f.Fd()), &st) == nil && st.Size < c.pos {
			// Truncated in place: start over.
			if _, err := c.f.Seek(0, io.SeekStart); err == nil {
				c.pos = 0
			}
		}
		if err := r.sleep(); err != nil {
			return 0, err
		}
	}
}

// Close ends the read.
func (r *Reader) Close() error {
	if r.stop != nil {
		close(r.stop)
		<-r.stopped
		r.stop = nil
	}
	if r.cur != nil {
		r.cur.close()
		r.cur = nil
	}
	for _, s := range r.queue {
		s.close()
	}
	r.queue = nil
	if r.lock >= 0 && r.lock != r.dir {
		unix.Close(r.lock)
	}
	r.lock = -1
	if r.dir >= 0 {
		unix.Close(r.dir)
		r.dir = -1
	}
	return nil
}

func (r *Reader) sleep() error {
	t := time.NewTimer(r.opts.Poll)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-t.C:
		return nil
	}
}

// renamed reports whether the current file's name no longer names c.
func (r *Reader) renamed(c *source) bool {
	var st unix.Stat_t
	err := unix.Fstatat(r.dir, r.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return err != nil || st.Ino != c.ino
}

// snapshot opens the rotated files (oldest first) and the current file
// (nil when absent), retrying when a rotation ran meanwhile. Rotated
// files are opened in increasing number: a rotation running meanwhile only
// moves files to higher numbers, so each is seen at least once (duplicates
// are dropped by identity).
func (r *Reader) snapshot() ([]*source, *source, error) {
	if r.lock >= 0 {
		wait := readerLockWait
		if time.Now().Before(r.lockBusy) {
			wait = 0
		}
		unlock, ok := lockDir(r.lock, unix.LOCK_SH, wait)
		defer unlock()
		if !ok && wait > 0 {
			// The agent holds it (a rotation takes it for microseconds):
			// try once, without waiting, for the next second.
			r.lockBusy = time.Now().Add(time.Second)
		}
	}
	for attempt := 0; ; attempt++ {
		var before unix.Stat_t
		beforeErr := unix.Fstatat(r.dir, r.name, &before, unix.AT_SYMLINK_NOFOLLOW)
		top, err := r.highest()
		if err != nil {
			return nil, nil, err
		}
		var rot []*source
		seen := map[uint64]bool{}
		for n := 1; n <= top+2; n++ { // a shift may run meanwhile
			s, ok := r.openRotated(n)
			if !ok {
				continue
			}
			if seen[s.id] {
				s.close()
				continue
			}
			seen[s.id] = true
			rot = append(rot, s)
			if len(rot) == 1 && r.opts.scanned != nil {
				r.opts.scanned()
			}
		}
		cur, curErr := r.openCurrent()
		// Stable: agent.log named one file throughout. Absent before and
		// after is taken as "no log" only after a few tries, since a
		// rotation has a moment between renaming it and creating it.
		stable := (beforeErr == nil && cur != nil && cur.ino == before.Ino) ||
			(beforeErr != nil && curErr != nil && attempt >= 4)
		if stable || attempt >= 8 {
			// Newest first as opened: put the oldest first.
			for i, j := 0, len(rot)-1; i < j; i, j = i+1, j-1 {
				rot[i], rot[j] = rot[j], rot[i]
			}
			return rot, cur, nil
		}
		for _, s := range rot {
			s.close()
		}
		if cur != nil {
			cur.close()
		}
		time.Sleep(time.Millisecond)
	}
}

// highest is the highest rotated number present in the directory.
func (r *Reader) highest() (int, error) {
	fd, err := unix.Openat(r.dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("read agent log directory: %w", err)
	}
	d := os.NewFile(uintptr(fd), "log directory")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("read agent log directory: %w", err)
	}
	top := 0
	for _, e := range names {
		if n, ok := rotatedNumber(r.name, e); ok && n > top {
			top = n
		}
	}
	return top, nil
}

// openRotated opens rotated file n, plain (preferred: a compression may
// be finishing) or compressed.
func (r *Reader) openRotated(n int) (*source, bool) {
	if fd, st, err := openRegular(r.dir, rotatedName(r.name, n, false), unix.O_RDONLY); err == nil {
		f := os.NewFile(uintptr(fd), rotatedName(r.name, n, false))
		return &source{f: f, r: f, id: fileID(fd, &st), mtime: st.Mtim.Sec, n: n}, true
	}
	fd, st, err := openRegular(r.dir, rotatedName(r.name, n, true), unix.O_RDONLY)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), rotatedName(r.name, n, true))
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, false
	}
	s := &source{f: f, r: zr, mtime: zr.ModTime.Unix(), n: n}
	id, ok := parseGzipComment(zr.Comment)
	if !ok {
		// Not one of ours: an identity no plain file has.
		id = 1<<63 | st.Ino
	}
	s.id = id
	return s, true
}

// openCurrent opens the current file for following.
func (r *Reader) openCurrent() (*source, error) {
	fd, st, err := openRegular(r.dir, r.name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), r.name)
	return &source{f: f, r: f, id: fileID(fd, &st), ino: st.Ino, mtime: st.Mtim.Sec, live: true, size: st.Size}, nil
}

// skip positions c at c.skip.
func skip(c *source) error {
	n := c.skip
	c.skip = 0
	if c.r == io.Reader(c.f) {
		if _, err := c.f.Seek(n, io.SeekStart); err != nil {
			return err
		}
		c.pos = n
		return nil
	}
	_, err := io.CopyN(io.Discard, c.r, n)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

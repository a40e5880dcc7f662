package agentlog

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	ctx   context.Context
	dir   int
	name  string
	opts  ReadOptions
	queue []*source
	cur   *source
	// last is the identity of the last file read to its end; a follower
	// with nothing queued continues with the files rotated after it.
	last uint64
}

// Open starts reading the log in the directory dirfd, which the Reader
// takes over (Close closes it). ctx bounds a follow.
func Open(ctx context.Context, dirfd int, opts ReadOptions) (*Reader, error) {
	if opts.Name == "" {
		opts.Name = Name
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	r := &Reader{ctx: ctx, dir: dirfd, name: opts.Name, opts: opts}
	rot, cur, err := r.snapshot()
	if err != nil {
		unix.Close(dirfd)
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
	return r, nil
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
			if len(r.queue) > 0 {
				r.cur, r.queue = r.queue[0], r.queue[1:]
				continue
			}
			if !r.opts.Follow {
				return 0, io.EOF
			}
			if err := r.queueAfter(r.last); err != nil {
				return 0, err
			}
			if len(r.queue) == 0 {
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
			r.cur, r.last = nil, c.id
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
	if r.cur != nil {
		r.cur.close()
		r.cur = nil
	}
	for _, s := range r.queue {
		s.close()
	}
	r.queue = nil
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

// queueAfter queues the files rotated after the file id, then the
// current file. When id is gone (rotated out before it was read, or 0:
// there was no log when the read began) every rotated file is newer: the
// oldest are dropped first.
func (r *Reader) queueAfter(id uint64) error {
	rot, cur, err := r.snapshot()
	if err != nil {
		return err
	}
	for i, s := range rot {
		if s.id == id {
			for _, o := range rot[:i+1] {
				o.close()
			}
			rot = rot[i+1:]
			break
		}
	}
	r.queue = rot
	if cur != nil {
		r.queue = append(r.queue, cur)
	}
	return nil
}

// snapshot opens the rotated files (oldest first) and the current file
// (nil when absent), retrying when a rotation ran meanwhile. Rotated
// files are opened in increasing number: a rotation running meanwhile only
// moves files to higher numbers, so each is seen at least once (duplicates
// are dropped by identity).
func (r *Reader) snapshot() ([]*source, *source, error) {
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

package agentlog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// WriterOptions are a Writer's optional settings.
type WriterOptions struct {
	// Name is the current file's name (default Name).
	Name string
	// Now is the clock of the index and of the dropped-output marker
	// (default time.Now).
	Now func() time.Time
	// UID and GID own the log files when UID is not negative (the agent
	// owns its log, as before rotation existed).
	UID, GID int
}

// Writer appends to a rotating log in one directory; see the package doc.
// Write never fails and never blocks on a full disk (a rotation may wait up
// to writerLockWait for the directory's lock; see lockDir): what cannot be
// written is dropped and counted, and a marker line says so as soon as
// writing works again. A Writer is safe for concurrent use.
type Writer struct {
	dir      int
	name     string
	cfg      Config
	now      func() time.Time
	uid, gid int
	gran     int64

	mu        sync.Mutex
	f         int    // the current file, -1 when it could not be opened
	id        uint64 // its fileID
	size      int64
	lineStart bool
	idx       int // its index, -1 when unusable
	recs      int
	last      Record
	comp      chan struct{} // closed when the running compression ended
	dropped   int64
	dropErr   error
	closed    bool
}

// OpenWriter opens the log in the directory dirfd (the caller keeps dirfd;
// the writer uses a duplicate). An existing current file is appended to. A
// plain agent.log.1 left by an interrupted compression is compressed now.
func OpenWriter(dirfd int, cfg Config, opts WriterOptions) (*Writer, error) {
	cfg = cfg.WithDefaults()
	// Smaller than Validate allows, for tests; never below one line piece.
	if cfg.MaxSize < LineCap || cfg.Keep < 0 || cfg.Keep > MaxKeep {
		return nil, fmt.Errorf("open agent log: max size %d, keep %d: %w", cfg.MaxSize, cfg.Keep, errs.ErrInvalid)
	}
	dir, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open agent log: duplicate directory descriptor: %w", err)
	}
	w := &Writer{dir: dir, name: opts.Name, cfg: cfg, now: opts.Now, uid: opts.UID, gid: opts.GID,
		f: -1, idx: -1, gran: max(cfg.MaxSize/MaxRecords, 1)}
	if w.name == "" {
		w.name = Name
	}
	if w.now == nil {
		w.now = time.Now
	}
	if err := w.open(); err != nil {
		unix.Close(dir)
		return nil, err
	}
	if cfg.Keep > 0 && exists(dir, rotatedName(w.name, 1, false)) {
		if exists(dir, rotatedName(w.name, 1, true)) {
			// The compression ended but the plain file was not removed yet.
			_ = unix.Unlinkat(dir, rotatedName(w.name, 1, false), 0)
		} else {
			w.startCompression()
		}
	}
	return w, nil
}

// Write appends p. It always reports len(p) written: see Writer.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, os.ErrClosed
	}
	now := w.now()
	if w.dropped > 0 {
		d, derr := w.dropped, w.dropErr
		w.dropped = 0
		msg := fmt.Sprintf("[stead %s] %d bytes of the service's output were dropped: %v\n",
			now.UTC().Format(time.RFC3339), d, derr)
		if !w.lineStart {
			msg = "\n" + msg
		}
		if !w.emit([]byte(msg), now) {
			w.dropped = d
			w.drop(int64(len(p)), w.dropErr)
			return len(p), nil
		}
	}
	w.emit(p, now)
	return len(p), nil
}

// Dropped reports how many bytes are dropped and not yet reported by a
// marker line.
func (w *Writer) Dropped() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Close waits for a running compression and closes the files.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.waitCompression()
	w.closeCurrent()
	return unix.Close(w.dir)
}

// emit writes p, rotating before a line that would not fit; it reports
// whether everything was written.
func (w *Writer) emit(p []byte, now time.Time) bool {
	for len(p) > 0 {
		if w.f < 0 {
			if err := w.open(); err != nil {
				w.drop(int64(len(p)), err)
				return false
			}
		}
		room := w.cfg.MaxSize - w.size
		if int64(len(p)) <= room {
			return w.put(p, now)
		}
		chunk := p[:max(room, 0)]
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			chunk = chunk[:i+1]
		} else if w.size > 0 {
			w.rotate()
			continue
		}
		// Either whole lines that fit, or (in an empty file) a piece
		// longer than a whole file.
		if !w.put(chunk, now) {
			w.drop(int64(len(p)-len(chunk)), w.dropErr)
			return false
		}
		p = p[len(chunk):]
		w.rotate()
	}
	return true
}

// put appends p to the current file, indexing first.
func (w *Writer) put(p []byte, now time.Time) bool {
	w.record(now)
	for len(p) > 0 {
		n, err := unix.Write(w.f, p)
		if n > 0 {
			w.size += int64(n)
			w.lineStart = p[n-1] == '\n'
			p = p[n:]
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.drop(int64(len(p)), err)
			return false
		}
		if n == 0 {
			w.drop(int64(len(p)), io.ErrShortWrite)
			return false
		}
	}
	return true
}

// drop counts n bytes that could not be written.
func (w *Writer) drop(n int64, err error) {
	w.dropped += n
	if err != nil {
		w.dropErr = err
	}
}

// record appends an index record for a write at now when one is due.
func (w *Writer) record(now time.Time) {
	if w.idx < 0 || w.recs >= MaxRecords {
		return
	}
	sec := now.Unix()
	if w.recs > 0 && (sec <= w.last.Time || w.size-w.last.Off < w.gran) {
		return
	}
	r := Record{Time: sec, Off: w.size}
	b := appendRecord(nil, r)
	if n, err := unix.Write(w.idx, b); err != nil || n != len(b) {
		// A torn record would corrupt the next ones: stop indexing this
		// file (readers fall back to its write time).
		unix.Close(w.idx)
		w.idx = -1
		return
	}
	w.recs++
	w.last = r
}

// open opens (or creates) the current file and its index.
func (w *Writer) open() error {
	fd, st, err := openRegular(w.dir, w.name, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND)
	if err != nil {
		return fmt.Errorf("open agent log %s: %w", w.name, err)
	}
	if w.uid >= 0 {
		_ = unix.Fchown(fd, w.uid, w.gid)
	}
	w.f, w.id, w.size, w.lineStart = fd, fileID(fd, &st), st.Size, true
	w.recs, w.last = 0, Record{}
	ifd, _, err := openRegular(w.dir, indexName(w.name, 0), unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return nil // the log works without its index
	}
	w.idx = ifd
	if ix, err := ParseIndex(readSome(ifd, maxIndexBytes)); err == nil && ix.ID == w.id {
		if n := len(ix.Records); n > 0 {
			w.recs, w.last = n, ix.Records[n-1]
		}
		if _, err := unix.Seek(ifd, 0, io.SeekEnd); err == nil {
			return nil
		}
	}
	// Absent, corrupt or another file's: start it over.
	h := indexHeader(w.id)
	if unix.Ftruncate(ifd, 0) != nil {
		w.closeIndex()
		return nil
	}
	if n, err := unix.Pwrite(ifd, h, 0); err != nil || n != len(h) {
		w.closeIndex()
		return nil
	}
	if _, err := unix.Seek(ifd, int64(len(h)), io.SeekStart); err != nil {
		w.closeIndex()
	}
	return nil
}

func (w *Writer) closeIndex() {
	if w.idx >= 0 {
		unix.Close(w.idx)
		w.idx = -1
	}
}

func (w *Writer) closeCurrent() {
	if w.f >= 0 {
		unix.Close(w.f)
		w.f = -1
	}
	w.closeIndex()
}

// rotate shifts the rotated files, renames the current one to .1, opens a
// new one and starts compressing .1.
func (w *Writer) rotate() {
	w.waitCompression()
	unlock, _ := lockDir(w.dir, unix.LOCK_EX, writerLockWait)
	defer unlock()
	k := w.cfg.Keep
	if k == 0 {
		if err := unix.Unlinkat(w.dir, w.name, 0); err != nil && w.f >= 0 {
			_ = unix.Ftruncate(w.f, 0)
		}
		_ = unix.Unlinkat(w.dir, indexName(w.name, 0), 0)
		w.closeCurrent()
		_ = w.open()
		return
	}
	for _, gz := range []bool{true, false} {
		_ = unix.Unlinkat(w.dir, rotatedName(w.name, k, gz), 0)
	}
	_ = unix.Unlinkat(w.dir, indexName(w.name, k), 0)
	for i := k - 1; i >= 1; i-- {
		for _, gz := range []bool{true, false} {
			_ = unix.Renameat(w.dir, rotatedName(w.name, i, gz), w.dir, rotatedName(w.name, i+1, gz))
		}
		_ = unix.Renameat(w.dir, indexName(w.name, i), w.dir, indexName(w.name, i+1))
	}
	renamed := unix.Renameat(w.dir, w.name, w.dir, rotatedName(w.name, 1, false)) == nil
	if renamed {
		_ = unix.Renameat(w.dir, indexName(w.name, 0), w.dir, indexName(w.name, 1))
	} else if w.f >= 0 {
		// The file cannot be renamed: start it over rather than grow.
		_ = unix.Ftruncate(w.f, 0)
		_ = unix.Unlinkat(w.dir, indexName(w.name, 0), 0)
	}
	w.closeCurrent()
	_ = w.open()
	if renamed {
		w.startCompression()
	}
}

func (w *Writer) waitCompression() {
	if w.comp != nil {
		<-w.comp
		w.comp = nil
	}
}

func (w *Writer) startCompression() {
	done := make(chan struct{})
	w.comp = done
	go func() {
		defer close(done)
		_ = compress(w.dir, w.name, w.uid, w.gid)
	}()
}

// compress turns the plain rotated file .1 into .1.gz: a temporary file,
// synced and renamed into place, then the plain file removed. On failure
// the plain file stays (readers take it) and the temporary file goes.
func compress(dir int, name string, uid, gid int) (err error) {
	src, st, err := openRegular(dir, rotatedName(name, 1, false), unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("compress agent log: %w", err)
	}
	in := os.NewFile(uintptr(src), rotatedName(name, 1, false))
	defer in.Close()
	tmp := tmpName(name)
	_ = unix.Unlinkat(dir, tmp, 0)
	dst, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("compress agent log: create %s: %w", tmp, err)
	}
	out := os.NewFile(uintptr(dst), tmp)
	defer func() {
		out.Close()
		if err != nil {
			_ = unix.Unlinkat(dir, tmp, 0)
		}
	}()
	zw, err := gzip.NewWriterLevel(out, gzip.BestSpeed)
	if err != nil {
		return fmt.Errorf("compress agent log: %w", err)
	}
	zw.Comment = gzipComment(fileID(src, &st))
	zw.ModTime = time.Unix(st.Mtim.Unix())
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress agent log: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress agent log: %w", err)
	}
	if uid >= 0 {
		_ = out.Chown(uid, gid)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("compress agent log: sync: %w", err)
	}
	if err := unix.Renameat(dir, tmp, dir, rotatedName(name, 1, true)); err != nil {
		return fmt.Errorf("compress agent log: rename: %w", err)
	}
	_ = unix.Unlinkat(dir, rotatedName(name, 1, false), 0)
	return nil
}

// gzipComment records the fileID of the plain file a compressed one came
// from: a follower that held the plain file open finds it by this.
func gzipComment(id uint64) string { return "stead-agentlog id=" + strconv.FormatUint(id, 10) }

// parseGzipComment is the inverse of gzipComment.
func parseGzipComment(c string) (uint64, bool) {
	rest, ok := bytes.CutPrefix([]byte(c), []byte("stead-agentlog id="))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(string(rest), 10, 64)
	return n, err == nil
}

// openRegular opens name in dir without following a symlink and without
// blocking on a FIFO; anything but a regular file there is refused, or,
// when flags has O_CREAT, removed and replaced by a new file.
func openRegular(dir int, name string, flags int) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
		if err == nil {
			if err = unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				return fd, st, nil
			}
			unix.Close(fd)
			if err == nil {
				err = unix.EINVAL
			}
		}
		if errors.Is(err, unix.ENOENT) || flags&unix.O_CREAT == 0 || attempt > 0 {
			return -1, st, fmt.Errorf("open %s: %w", name, err)
		}
		// Not a regular file (a symlink gives ELOOP): replace it.
		if uerr := unix.Unlinkat(dir, name, 0); uerr != nil {
			return -1, st, fmt.Errorf("open %s: %w", name, err)
		}
	}
}

// fileID identifies a file for as long as the log keeps it: its inode
// number mixed with its birth time, since a file system may give a freed
// inode number to a new file (btrfs does not; ext4 does).
func fileID(fd int, st *unix.Stat_t) uint64 {
	var sx unix.Statx_t
	id := st.Ino
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &sx) == nil && sx.Mask&unix.STATX_BTIME != 0 {
		b := uint64(sx.Btime.Sec)*1_000_000_000 + uint64(sx.Btime.Nsec)
		id ^= (b + 0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9
	}
	return id
}

// exists reports whether name is in dir (not following a symlink).
func exists(dir int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// readSome reads up to limit bytes from fd's start.
func readSome(fd int, limit int) []byte {
	var b []byte
	buf := make([]byte, 64<<10)
	for len(b) < limit {
		n, err := unix.Pread(fd, buf[:min(len(buf), limit-len(b))], int64(len(b)))
		if n <= 0 || err != nil {
			break
		}
		b = append(b, buf[:n]...)
	}
	return b
}

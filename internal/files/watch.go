package files

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
)

// WatchOp is the kind of a change a Watcher reports.
type WatchOp int

// Changes a Watcher reports.
const (
	WatchCreate WatchOp = iota + 1 // created, or moved in
	WatchWrite                     // its content changed
	WatchRemove                    // removed (a watched directory too)
	WatchRename                    // moved away (its new name, if watched, comes as a create)
	WatchChmod                     // its metadata changed
)

// WatchEvent is one change under a watched directory.
type WatchEvent struct {
	// Name is the changed entry's path relative to the watched directory
	// (as the watcher knows it: a directory moved within the tree keeps
	// the name it was watched under).
	Name string
	Op   WatchOp
	// Dir is set when the entry is a directory.
	Dir bool
}

// MaxWatchDirs caps the directories one recursive Watcher watches.
const MaxWatchDirs = 4096

// Watcher reports changes under a directory of a root, with inotify. The
// directory is resolved in the root as every path is (symlinks followed
// only inside it); subdirectories (recursive) are opened relative to their
// parent's descriptor without following any symlink, and each watch is
// added through its descriptor, so nothing the sandbox renames or swaps
// makes the watcher watch a path outside the root.
type Watcher struct {
	ino       *os.File
	ifd       int // ino's descriptor (ino.Fd would make it blocking)
	recursive bool
	events    chan WatchEvent
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu   sync.Mutex
	dirs map[int]watchedDir // by watch descriptor
}

type watchedDir struct {
	fd  int
	rel string // "" for the watched directory itself
}

// watchMask is what a Watcher asks inotify for.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watch starts watching the directory at sandbox path p; with recursive,
// its subdirectories too (also those made later), up to MaxWatchDirs. A
// path that is not a directory is errs.ErrInvalid; a tree of more
// directories is errs.ErrTooLarge. Close the Watcher when done.
func (r *Root) Watch(p string, recursive bool) (*Watcher, error) {
	p, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	fd, err := r.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, opErr("watch", p, err)
	}
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: inotify: %w", p, err)
	}
	w := &Watcher{ino: os.NewFile(uintptr(ifd), "inotify"), ifd: ifd, recursive: recursive,
		events: make(chan WatchEvent, 256), done: make(chan struct{}), dirs: map[int]watchedDir{}}
	if err := w.add(fd, "", recursive, nil); err != nil {
		w.closeAll()
		return nil, fmt.Errorf("watch %s: %w", p, err)
	}
	w.wg.Add(1)
	go w.read()
	return w, nil
}

// maxFoundCreates bounds the creates one new directory's entries give
// (add): a tree of millions moved in is not held in memory as events.
const maxFoundCreates = 4096

// add watches the directory open as fd (taking it over) under rel and,
// with deep, its subdirectories. With found, every entry under it goes
// into *found as a create: a directory made while the watcher runs is
// watched only once its create is read, and what was made in it before
// that has no event of its own (its creates may then come twice).
func (w *Watcher) add(fd int, rel string, deep bool, found *[]WatchEvent) error {
	w.mu.Lock()
	n := len(w.dirs)
	w.mu.Unlock()
	if n >= MaxWatchDirs {
		unix.Close(fd)
		return fmt.Errorf("more than %d directories to watch: %w", MaxWatchDirs, errs.ErrTooLarge)
	}
	// The descriptor's magic link (followed: IN_DONT_FOLLOW would watch
	// the link) names exactly the directory opened,
	// whatever happened to its path since.
	wd, err := unix.InotifyAddWatch(w.ifd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("the system's inotify watches are used up: %w", errs.ErrTooLarge)
		}
		return mapErrno(err)
	}
	w.mu.Lock()
	if old, ok := w.dirs[wd]; ok && old.fd != fd {
		unix.Close(old.fd) // the same directory again (a bind mount)
	}
	w.dirs[wd] = watchedDir{fd: fd, rel: rel}
	w.mu.Unlock()
	if !deep {
		return nil
	}
	return eachName(fd, rel, func(name string) error {
		cfd, err := openChildDir(fd, name, unix.O_RDONLY)
		if found != nil && len(*found) < maxFoundCreates {
			*found = append(*found, WatchEvent{Name: path.Join(rel, name), Op: WatchCreate, Dir: err == nil})
		}
		if err != nil {
			return nil // not a directory, a symlink, or gone
		}
		return w.add(cfd, path.Join(rel, name), true, found)
	})
}

// Events returns the changes as they happen; it is closed when the
// Watcher is closed (or the watched directory is removed).
func (w *Watcher) Events() <-chan WatchEvent { return w.events }

// Close stops the watcher and releases its descriptors.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		w.ino.Close() // ends a blocked read
	})
	w.wg.Wait()
	return nil
}

// closeAll releases every descriptor (read's last act, or a failed start).
func (w *Watcher) closeAll() {
	w.ino.Close()
	w.mu.Lock()
	for wd, d := range w.dirs {
		unix.Close(d.fd)
		delete(w.dirs, wd)
	}
	w.mu.Unlock()
}

// read turns inotify records into events until closed.
func (w *Watcher) read() {
	defer w.wg.Done()
	defer close(w.events)
	defer w.closeAll()
	buf := make([]byte, 64<<10)
	for {
		// A watched directory held open gets no IN_DELETE_SELF when it is
		// removed (its inode lives on): every second without a record,
		// the watched directory is checked for a link count of 0.
		w.ino.SetReadDeadline(time.Now().Add(time.Second))
		n, err := w.ino.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if w.rootGone() {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := string(nameBytes)
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			if !w.handle(int(ev.Wd), ev.Mask, name) {
				return
			}
		}
	}
}

// rootGone reports whether the watched directory was removed.
func (w *Watcher) rootGone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.dirs {
		if d.rel == "" {
			var st unix.Stat_t
			return unix.Fstat(d.fd, &st) != nil || st.Nlink == 0
		}
	}
	return true
}

// drop stops watching the directory rel and those below it (removed or
// moved away; one moved within the tree is watched again under its new
// name).
func (w *Watcher) drop(rel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.dirs {
		if d.rel == rel || strings.HasPrefix(d.rel, rel+"/") {
			unix.InotifyRmWatch(w.ifd, uint32(wd))
			unix.Close(d.fd)
			delete(w.dirs, wd)
		}
	}
}

// handle reports one inotify record; false ends the watcher (closed, or
// the watched directory itself is gone).
func (w *Watcher) handle(wd int, mask uint32, name string) bool {
	w.mu.Lock()
	d, ok := w.dirs[wd]
	if ok && mask&unix.IN_IGNORED != 0 {
		unix.Close(d.fd)
		delete(w.dirs, wd)
	}
	w.mu.Unlock()
	switch {
	case !ok:
		return true // a watch already dropped
	case mask&unix.IN_IGNORED != 0:
		return d.rel != "" // the watched directory itself is gone
	}
	isDir := mask&unix.IN_ISDIR != 0
	if mask&unix.IN_DELETE_SELF != 0 {
		if d.rel == "" {
			return false // the watched directory is gone
		}
		return true // reported by its parent as a delete
	}
	rel := path.Join(d.rel, name)
	var op WatchOp
	var found []WatchEvent
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		op = WatchCreate
		if isDir && w.recursive {
			if cfd, err := openChildDir(d.fd, name, unix.O_RDONLY); err == nil {
				w.add(cfd, rel, true, &found) // past the cap, the rest is not watched
			}
		}
	case mask&unix.IN_MODIFY != 0:
		op = WatchWrite
	case mask&unix.IN_DELETE != 0:
		op = WatchRemove
		if isDir {
			w.drop(rel)
		}
	case mask&unix.IN_MOVED_FROM != 0:
		op = WatchRename
		if isDir {
			w.drop(rel)
		}
	case mask&unix.IN_ATTRIB != 0:
		op = WatchChmod
	default:
		return true
	}
	for _, ev := range append([]WatchEvent{{Name: rel, Op: op, Dir: isDir}}, found...) {
		select {
		case w.events <- ev:
		case <-w.done:
			return false
		}
	}
	return true
}

// Package fdwatch waits on many file descriptors with one goroutine.
//
// A daemon with a thousand idle sandboxes holds a thousand idle things per
// kind: the pidfd of each sandbox's init (to reap it when it exits) and the
// listening agent socket of each (to accept the agent's calls). With a
// goroutine blocked on each, every one costs a goroutine stack (8 KiB and
// more) and scheduler state for as long as the sandbox runs; a Watcher
// holds them all in one epoll set, waited on by one goroutine.
package fdwatch

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by Watch and Once on a closed Watcher.
var ErrClosed = errors.New("fdwatch: watcher closed")

// Watcher calls a function when a file descriptor becomes readable. Its
// functions run one at a time on the Watcher's goroutine, with its lock
// held: they must not block, and must not call the Watcher (Watch, Once,
// a stop function or Close), which would deadlock.
type Watcher struct {
	epfd int
	wake int // eventfd that ends the wait on Close

	mu      sync.Mutex
	next    int32
	watches map[int32]*watch
	closed  bool
	err     error // why the wait ended, if not by Close
	done    chan struct{}
}

type watch struct {
	fd   int
	fn   func() time.Duration
	once bool
}

// wakeKey is the epoll key of the wake eventfd; watches get other keys.
const wakeKey = 0

// New starts a Watcher.
func New() (*Watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fdwatch: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("fdwatch: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeKey}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("fdwatch: epoll_ctl: %w", err)
	}
	w := &Watcher{epfd: epfd, wake: wake, watches: map[int32]*watch{}, done: make(chan struct{})}
	go w.run()
	return w, nil
}

// Watch calls fn each time fd is readable (level-triggered: fn should
// consume what made it readable, e.g. accept the pending connections)
// until stop is called. fn must neither block nor close fd. When fn
// returns a positive duration the watch rests that long before fd is
// watched again (what made it readable cannot be consumed now, e.g. the
// process is out of descriptors: a level-triggered watch would otherwise
// fire at once, again and again). stop is idempotent and returns once fn
// is not running and will not run again; the caller closes fd after that.
func (w *Watcher) Watch(fd int, fn func() time.Duration) (stop func(), err error) {
	return w.add(fd, fn, false)
}

// Once calls fn the first time fd is readable, after the watch has ended
// (so fn may close fd, or start what does). stop ends the watch before
// that, if it has not fired; it returns once fn is not running.
func (w *Watcher) Once(fd int, fn func()) (stop func(), err error) {
	return w.add(fd, func() time.Duration { fn(); return 0 }, true)
}

func (w *Watcher) add(fd int, fn func() time.Duration, once bool) (func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	if w.err != nil {
		return nil, w.err
	}
	key := w.next
	for {
		key++
		if key <= wakeKey {
			key = wakeKey + 1
		}
		if _, used := w.watches[key]; !used {
			break
		}
	}
	w.next = key
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: key}); err != nil {
		return nil, fmt.Errorf("fdwatch: watch fd %d: %w", fd, err)
	}
	wt := &watch{fd: fd, fn: fn, once: once}
	w.watches[key] = wt
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.watches[key] == wt {
			w.remove(key, wt)
		}
	}, nil
}

// remove ends a watch; w.mu is held.
func (w *Watcher) remove(key int32, wt *watch) {
	delete(w.watches, key)
	unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, wt.fd, nil)
}

// Len is the number of watches in force.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

func (w *Watcher) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// Not expected of a valid epoll descriptor; new watches get
			// the error rather than waiting for nothing.
			w.mu.Lock()
			w.err = fmt.Errorf("fdwatch: epoll_wait: %w", err)
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd == wakeKey {
				continue
			}
			// A watch stopped since the wait began is gone from the map;
			// keys are not reused while a watch holds them.
			wt, ok := w.watches[ev.Fd]
			if !ok {
				continue
			}
			if wt.once {
				w.remove(ev.Fd, wt)
			}
			if rest := wt.fn(); rest > 0 && !wt.once {
				w.rest(ev.Fd, wt, rest)
			}
		}
		w.mu.Unlock()
	}
}

// rest stops watching wt's fd for d, then watches it again unless the
// watch ended meanwhile; w.mu is held.
func (w *Watcher) rest(key int32, wt *watch, d time.Duration) {
	if unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, wt.fd, &unix.EpollEvent{Fd: key}) != nil {
		return
	}
	time.AfterFunc(d, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.closed && w.watches[key] == wt {
			unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, wt.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: key})
		}
	})
}

// Close ends every watch (their functions are not called) and the
// Watcher's goroutine; it returns once that goroutine is done.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	for key, wt := range w.watches {
		w.remove(key, wt)
	}
	w.mu.Unlock()
	var one [8]byte
	one[0] = 1
	unix.Write(w.wake, one[:])
	<-w.done
	unix.Close(w.wake)
	return unix.Close(w.epfd)
}

package files

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// AsUser runs fn with the file-system credentials of uid and gid (and no
// supplementary groups but gid): every path it opens and every file it
// makes is checked and owned as that user's, the way a process of the
// sandbox running as uid would be. It runs fn on an OS thread of its own
// whose credentials are changed (setfsuid, setfsgid and setgroups act on
// one thread); the thread is thrown away afterwards, never reused. Leaving
// fs uid 0 drops the capabilities that bypass permission checks
// (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN, CAP_MKNOD, ...) from the
// thread. fn must not start goroutines that touch files: they run on other
// threads, with the daemon's credentials. uid 0 runs fn as is.
func AsUser(uid, gid int, fn func() error) error {
	if uid == 0 && gid == 0 {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's exit ends the thread with it.
		runtime.LockOSThread()
		if err := unix.Setgroups([]int{gid}); err != nil {
			done <- fmt.Errorf("drop to uid %d: setgroups: %w", uid, err)
			return
		}
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		// setfs[ug]id report no error: read the values back.
		if got, _ := unix.SetfsuidRetUid(-1); got != uid {
			done <- fmt.Errorf("drop to uid %d: fsuid is %d", uid, got)
			return
		}
		if got, _ := unix.SetfsgidRetGid(-1); got != gid {
			done <- fmt.Errorf("drop to gid %d: fsgid is %d", gid, got)
			return
		}
		done <- fn()
	}()
	return <-done
}

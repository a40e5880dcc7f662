package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Exit codes of a process that could not be started, as POSIX shells
// give them.
const (
	// ExitNotFound is the exit code of a program that does not exist
	// (not in $PATH, or no such file).
	ExitNotFound = 127
	// ExitCannotRun is the exit code of a program that exists but cannot
	// be run: not executable, a directory, an unknown binary format.
	ExitCannotRun = 126
)

// startFailure is a program that is missing or cannot run. It is not an
// error of the request: the exec "runs" and ends with code, msg on its
// stderr, as it would in a shell.
type startFailure struct {
	code int
	msg  string // `exec: "nope": executable file not found in $PATH`
}

// Error returns the message.
func (e *startFailure) Error() string { return e.msg }

// cwdError is a working directory the process cannot start in. It is the
// request's fault and names the directory, not the program.
type cwdError struct {
	dir string
	why string
}

// Error names the directory and what is wrong with it.
func (e *cwdError) Error() string { return fmt.Sprintf("cwd %s: %s", e.dir, e.why) }

// execFailureCode is the shell exit code of a failed execve, or 0 when the
// failure is not the program's (out of memory, too many processes).
func execFailureCode(err error) int {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return 0
	}
	switch en {
	case syscall.ENOENT:
		return ExitNotFound
	case syscall.EACCES, syscall.ENOEXEC, syscall.EISDIR, syscall.ENOTDIR, syscall.ELOOP, syscall.ETXTBSY, syscall.ENAMETOOLONG:
		return ExitCannotRun
	}
	return 0
}

// errnoText is the bare text of err's errno ("permission denied"), or
// err's text.
func errnoText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// checkCwd reports a working directory that does not exist, is not a
// directory, or (for a uid other than 0) lies below a directory the uid
// may not search. Checked before the fork: a chdir that fails in the child
// would be reported like a program that cannot run.
func checkCwd(dir string, uid, gid int) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &cwdError{dir, "no such directory"}
	case errors.Is(err, syscall.ENOTDIR):
		return &cwdError{dir, "not a directory"}
	case err != nil:
		return &cwdError{dir, errnoText(err)}
	case !st.IsDir():
		return &cwdError{dir, "not a directory"}
	case uid == 0:
		return nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return &cwdError{dir, errnoText(err)}
	}
	if !filepath.IsAbs(real) {
		real = filepath.Join("/", real) // init's own working directory
	}
	for d := real; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return &cwdError{dir, errnoText(err)}
		}
		if !searchable(st, uid, gid) {
			return &cwdError{dir, fmt.Sprintf("permission denied (uid %d may not enter %s)", uid, d)}
		}
		if d == "/" {
			return nil
		}
	}
}

// searchable reports whether uid:gid (with no supplementary groups, as
// init starts processes) may search the directory st by its mode bits.
func searchable(st os.FileInfo, uid, gid int) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	mode := st.Mode().Perm()
	switch {
	case int(sys.Uid) == uid:
		return mode&0o100 != 0
	case int(sys.Gid) == gid:
		return mode&0o010 != 0
	}
	return mode&0o001 != 0
}

// reportStartFailure ends an exec whose program is missing or cannot run
// the way a shell would: the message on the process's stderr (its
// terminal, or its log for a background exec) and exit code sf.code.
func (in *initProc) reportStartFailure(c *conn, req Request, p procSpec, master *os.File, logPath string, sf *startFailure) {
	line := []byte("stead: " + sf.msg + "\n")
	switch {
	case req.TTY:
		p.files[2].Write(line)
		err := c.send(Reply{Type: "started"}, master)
		master.Close()
		if err == nil {
			c.send(Reply{Type: "exit", ExitCode: sf.code})
		}
	case req.Background:
		// No process and so no pid: the reply says how it ended.
		p.files[2].Write(line)
		c.send(Reply{Type: "error", Error: sf.msg, ExitCode: sf.code, Invalid: true, LogPath: logPath})
	default:
		p.files[2].Write(line)
		closeAll(p.files) // the daemon sees EOF on stdout and stderr
		if c.send(Reply{Type: "started"}) == nil {
			c.send(Reply{Type: "exit", ExitCode: sf.code})
		}
	}
	in.log.Debug("exec failed to start", "args", p.args, "code", sf.code, "err", sf.msg)
}

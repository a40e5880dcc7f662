// Package agentlog holds the agent service's rotating log: the [Writer]
// that stead's init feeds from the service's output pipe, and the [Reader]
// that the daemon uses to read it back across rotations.
//
// # Files
//
// All files live in one directory (/var/log in the sandbox), which both sides
// open once and then address by name relative to that descriptor, never
// following a symlink (the agent may plant one):
//
//	agent.log            the current file; init appends to it
//	agent.log.1          the newest rotated file while it is being compressed
//	agent.log.N.gz       rotated files, 1 the newest, Keep the oldest
//	.agent.log.idx       time index of agent.log (.agent.log.N.idx for N)
//
// A rotated file may also stay plain (agent.log.N) when compressing it
// failed (a full disk); readers take either form.
//
// # Rotation
//
// The writer rotates when the next bytes would make agent.log pass MaxSize,
// and only at a line boundary: a line (or a piece of at most [LineCap] bytes
// of a longer one) is never split between two files, so every file is at
// most MaxSize bytes. Rotation drops agent.log.Keep.gz, renames agent.log.N
// to N+1, renames agent.log to agent.log.1 and creates a new agent.log; a
// background goroutine then compresses agent.log.1 into agent.log.1.gz (a
// temporary file renamed into place, then the plain file removed). The writer
// waits for a compression only when the next rotation comes before it ended.
// After a rotation the writer never writes the renamed file again, which is
// what lets a follower drain its open descriptor of it.
//
// Bound: the rotated files and agent.log hold at most MaxSize × (Keep+1)
// bytes, plus the gzip overhead of incompressible data (about 0.1%) and,
// while a compression runs, the temporary file it writes. The index files
// hold at most [MaxRecords] records (a few hundred KiB) each.
//
// # Times (--since)
//
// The log is kept verbatim: the agent reads its own log and expects its
// output byte for byte, so lines get no timestamp prefix (the CRI log format
// was rejected for that reason). Instead each file has a sidecar index of
// (unix second, offset) records: before writing, the writer appends a record
// when the second changed since the last record and the file grew by at
// least MaxSize/MaxRecords bytes since it. Bytes before a record's offset
// were written no later than its second, bytes after it no earlier, so
// `since` starts at the first record at or after the requested second: exact
// to a second while the output is faster than MaxSize/MaxRecords bytes a
// second (1 KiB/s at 64 MiB), and otherwise starting up to that many bytes
// early (never late). The index is renamed with its file. Its header names
// the identity of the file it describes (inode and birth time), so an index
// left over from a crash is recognized; a missing or corrupt index makes the reader fall back to the
// file's last write time (whole files).
//
// # Following
//
// A follower keeps agent.log open. At its end it checks whether the name
// agent.log now belongs to another file; if so it reads its descriptor to
// the end (complete: the writer renamed it before writing elsewhere), then
// reads the files rotated after it, oldest first, and continues with the
// new agent.log from offset 0. The writer holds the directory's flock while
// it renames files in a rotation and a reader holds it shared while it
// lists them, so a list is of one moment (see lockDir). Rotated files are
// recognized by identity (inode and birth time, as file systems reuse
// inode numbers): a plain file
// by its own, a compressed one by the one its gzip header records, so a
// follower loses nothing unless it falls Keep rotations behind.
package agentlog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"golang.org/x/sys/unix"
)

// Defaults and limits of [Config].
const (
	// DefaultMaxSize is the rotation size when none is configured.
	DefaultMaxSize = 64 << 20
	// DefaultKeep is the number of rotated files kept by default.
	DefaultKeep = 4
	// MinMaxSize is the smallest rotation size accepted.
	MinMaxSize = 1 << 20
	// MaxMaxSize is the largest rotation size accepted.
	MaxMaxSize = 64 << 30
	// MaxKeep is the largest number of rotated files accepted.
	MaxKeep = 100
	// LineCap is the longest piece of a line without a newline that the
	// writer holds back; a longer line is written in pieces of this size,
	// and a rotation may fall between two of them.
	LineCap = 64 << 10
	// MaxRecords bounds the records of one index file.
	MaxRecords = 65536
)

// Name is the current log file's name in its directory.
const Name = "agent.log"

// Config is a log's rotation policy.
type Config struct {
	// MaxSize is the size in bytes at which the current file is rotated.
	MaxSize int64
	// Keep is how many rotated files are kept (compressed); 0 keeps none.
	Keep int
}

// WithDefaults fills the zero MaxSize with DefaultMaxSize. A zero Keep
// stays zero only when MaxSize was set too (an explicit "keep none");
// an entirely zero Config gets DefaultKeep.
func (c Config) WithDefaults() Config {
	if c.MaxSize == 0 && c.Keep == 0 {
		return Config{MaxSize: DefaultMaxSize, Keep: DefaultKeep}
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
	}
	return c
}

// Validate checks the limits; errors wrap errs.ErrInvalid.
func (c Config) Validate() error {
	if c.MaxSize < MinMaxSize || c.MaxSize > MaxMaxSize {
		return fmt.Errorf("log max_size %s: want 1MiB to 64GiB: %w", FormatSize(c.MaxSize), errs.ErrInvalid)
	}
	if c.Keep < 0 || c.Keep > MaxKeep {
		return fmt.Errorf("log keep %d: want 0 to %d: %w", c.Keep, MaxKeep, errs.ErrInvalid)
	}
	return nil
}

// sizeUnits are the suffixes ParseSize accepts, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

// ParseSize parses a size such as "64MiB", "16M", "1g", "512KiB" or
// "1048576" (bytes). K, M and G without "B" are binary units; KB, MB and GB
// are decimal. Errors wrap errs.ErrInvalid.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || (n > 0 && mult > (1<<62)/n) {
		return 0, fmt.Errorf("size %q is not a size like 64MiB or 1048576: %w", s, errs.ErrInvalid)
	}
	return n * mult, nil
}

// FormatSize prints n in the largest binary unit that divides it.
func FormatSize(n int64) string {
	switch {
	case n > 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n > 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n > 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

// rotatedName is the name of the rotated file n, plain or compressed.
func rotatedName(name string, n int, gz bool) string {
	if gz {
		return name + "." + strconv.Itoa(n) + ".gz"
	}
	return name + "." + strconv.Itoa(n)
}

// indexName is the index of the current file (n = 0) or of rotated file n.
func indexName(name string, n int) string {
	if n == 0 {
		return "." + name + ".idx"
	}
	return "." + name + "." + strconv.Itoa(n) + ".idx"
}

// tmpName is the temporary file a compression writes.
func tmpName(name string) string { return "." + name + ".1.gz.tmp" }

// rotatedNumber parses a directory entry as rotated file n of name.
func rotatedNumber(name, entry string) (int, bool) {
	rest, ok := strings.CutPrefix(entry, name+".")
	if !ok {
		return 0, false
	}
	rest = strings.TrimSuffix(rest, ".gz")
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || n > 10*MaxKeep || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// How long each side waits for the log directory's lock (see lockDir).
// The writer waits out a reader's scan even when the reader is slow to be
// scheduled; a reader waits only for a rotation's renames.
const (
	writerLockWait = time.Second
	readerLockWait = 20 * time.Millisecond
)

// lockDir takes the flock of the directory open at fd (how is
// unix.LOCK_EX or unix.LOCK_SH) and returns what releases it and whether
// it was taken. The writer
// holds it exclusively while it renames files in a rotation, a reader
// shared while it opens the files it lists, so that the list is of one
// moment: a rotation running under a reader's scan can move a file past
// the scan or put a newer file before an older one.
//
// The agent can take the same lock, so neither side waits for it longer
// than wait: without it the writer rotates anyway and the reader falls
// back on checking that no rotation ran under its scan.
func lockDir(fd int, how int, wait time.Duration) (unlock func(), ok bool) {
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(fd, unix.LOCK_UN) }, true
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || !time.Now().Before(deadline) {
			return func() {}, false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

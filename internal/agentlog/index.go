package agentlog

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/stead-dev/stead/internal/errs"
)

// indexMagic starts an index file's header line: "stead-agentlog-index 1
// id=<fileID of the log file>\n". Records follow, one a line:
// "<unix second> <offset>\n", both increasing.
const indexMagic = "stead-agentlog-index 1 id="

// maxIndexBytes bounds what a reader loads of an index file.
const maxIndexBytes = MaxRecords*48 + 64

// Record says that the bytes of a log file from Off on were written at or
// after the unix second Time, and the bytes before Off no later than it.
type Record struct {
	Time int64
	Off  int64
}

// Index is a parsed index file.
type Index struct {
	// ID is the identity of the log file the index describes.
	ID uint64
	// Records are ordered by Time and Off, both strictly increasing.
	Records []Record
}

// indexHeader is the header line of the index of the file with inode ino.
func indexHeader(id uint64) []byte {
	return []byte(indexMagic + strconv.FormatUint(id, 10) + "\n")
}

// appendRecord appends r's line to b.
func appendRecord(b []byte, r Record) []byte {
	b = strconv.AppendInt(b, r.Time, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Off, 10)
	return append(b, '\n')
}

// ParseIndex parses an index file. A last line without its newline (a write
// cut short by a crash or a full disk) is ignored; anything else malformed,
// records out of order and more than MaxRecords records are errors wrapping
// errs.ErrInvalid, and the caller then ignores the index.
func ParseIndex(b []byte) (Index, error) {
	var ix Index
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || !bytes.HasPrefix(b, []byte(indexMagic)) {
		return ix, fmt.Errorf("log index: no header: %w", errs.ErrInvalid)
	}
	ino, err := strconv.ParseUint(string(b[len(indexMagic):nl]), 10, 64)
	if err != nil {
		return ix, fmt.Errorf("log index: bad header: %w", errs.ErrInvalid)
	}
	ix.ID = ino
	b = b[nl+1:]
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			break // a torn last record
		}
		line := b[:nl]
		b = b[nl+1:]
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return ix, fmt.Errorf("log index: bad record %q: %w", line, errs.ErrInvalid)
		}
		t, err1 := strconv.ParseInt(string(line[:sp]), 10, 64)
		off, err2 := strconv.ParseInt(string(line[sp+1:]), 10, 64)
		if err1 != nil || err2 != nil || t < 0 || off < 0 {
			return ix, fmt.Errorf("log index: bad record %q: %w", line, errs.ErrInvalid)
		}
		if n := len(ix.Records); n > 0 && (t <= ix.Records[n-1].Time || off <= ix.Records[n-1].Off) {
			return ix, fmt.Errorf("log index: record %q out of order: %w", line, errs.ErrInvalid)
		}
		if len(ix.Records) == MaxRecords {
			return ix, fmt.Errorf("log index: more than %d records: %w", MaxRecords, errs.ErrInvalid)
		}
		ix.Records = append(ix.Records, Record{Time: t, Off: off})
	}
	return ix, nil
}

// startOffset is where reading a file described by ix starts for the unix
// second since, and whether anything of the file is wanted at all, given
// mtime, the unix second of the file's last write. Bytes before the first
// record have no known time and are kept when any later byte is.
func (ix Index) startOffset(since, mtime int64) (int64, bool) {
	for i, r := range ix.Records {
		if r.Time >= since {
			if i == 0 {
				return 0, true
			}
			return r.Off, true
		}
	}
	if mtime < since {
		return 0, false
	}
	if n := len(ix.Records); n > 0 {
		return ix.Records[n-1].Off, true
	}
	return 0, true
}

package agentlog

import (
	"bytes"
	"errors"
	"io"
	"os"
	"time"
)

// DefaultIdle is how long Pump holds back the end of a line that has no
// newline yet (a prompt) before writing it as it is.
const DefaultIdle = 100 * time.Millisecond

// Pump copies the service's output from the pipe r to w until r ends (every
// write end closed) or fails, handing w whole lines: complete lines in one
// Write per read, the end of a line without a newline after idle without
// more output, and a line longer than LineCap in pieces of LineCap bytes.
// w must not block for long (a Writer waits at most writerLockWait, in a
// rotation, for readers listing the files), so the pipe stays drained and
// the service hardly waits for its log.
func Pump(r *os.File, w io.Writer, idle time.Duration) error {
	if idle <= 0 {
		idle = DefaultIdle
	}
	buf := make([]byte, 0, 4*LineCap)
	armed := false
	for {
		if pending := len(buf) > 0; pending != armed || pending {
			// A deadline only while a partial line waits.
			if pending {
				_ = r.SetReadDeadline(time.Now().Add(idle))
			} else {
				_ = r.SetReadDeadline(time.Time{})
			}
			armed = pending
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
				_, _ = w.Write(buf[:i+1])
				buf = append(buf[:0], buf[i+1:]...)
			}
			for len(buf) >= LineCap {
				_, _ = w.Write(buf[:LineCap])
				buf = append(buf[:0], buf[LineCap:]...)
			}
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if len(buf) > 0 {
				_, _ = w.Write(buf)
				buf = buf[:0]
			}
			continue
		}
		if len(buf) > 0 {
			_, _ = w.Write(buf)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

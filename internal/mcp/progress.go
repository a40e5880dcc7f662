package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// progressOutputBytes is how much of the latest output a progress
// notification carries at most.
const progressOutputBytes = 2 << 10

// recentOutput is an io.Writer, safe for concurrent use, that keeps the
// last limit bytes written since the last Take.
type recentOutput struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	total int64
}

// Write keeps the last limit bytes.
func (r *recentOutput) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += int64(len(p))
	r.buf = append(r.buf, p...)
	if len(r.buf) > r.limit {
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-r.limit:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what was kept, as written.
func (r *recentOutput) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.buf...)
}

// Take returns what was kept (as valid UTF-8) and how many bytes were
// written since the last Take, and empties it.
func (r *recentOutput) Take() (string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, n := toValidUTF8(r.buf), r.total
	r.buf, r.total = r.buf[:0], 0
	return s, n
}

// reportProgress sends a progress notification for token every
// ProgressInterval until the returned stop is called: progress is the
// seconds elapsed (it only grows, as the spec asks), the message says what
// runs, for how long, and the tail of the output written since the
// previous notification (from take). Send errors are ignored: a client
// that went away cancels the request anyway.
func (t *tools) reportProgress(ctx context.Context, ss *sdk.ServerSession, token any, what string, take func() (string, int64)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(t.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			elapsed := time.Since(start).Truncate(time.Second)
			out, n := take()
			msg := fmt.Sprintf("%s: running for %s", what, elapsed)
			if n == 0 {
				msg += ", no new output"
			} else {
				msg += fmt.Sprintf(", %d new bytes of output; latest:\n%s", n, out)
			}
			_ = ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: token, Progress: time.Since(start).Seconds(), Message: msg,
			})
		}
	}()
	return func() { cancel(); <-done }
}

// String returns the command as a short line for messages.
func (c Command) String() string {
	s := strings.Join(c, " ")
	if len(c) == 3 && c[0] == "/bin/sh" && c[1] == "-c" {
		s = c[2]
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return toValidUTF8([]byte(s))
}

// isStatus reports whether err is an API error of HTTP status code.
func isStatus(err error, code int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == code
}

// execError is apiError for an exec: a 409 (the sandbox is stopped or
// paused) says which tool to call.
func execError(what string, err error) error {
	if isStatus(err, 409) {
		return fmt.Errorf("%s: %w (call the start tool: it starts a stopped sandbox and resumes a paused one)", what, err)
	}
	return apiError(what, err)
}

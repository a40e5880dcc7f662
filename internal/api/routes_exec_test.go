package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

func TestExecBufferedOutputIsCappedAndMarkedTruncated(t *testing.T) {
	chunk := bytes.Repeat([]byte("y\n"), 1<<19) // 1 MiB
	fb := &fakeBackend{
		ExecFunc: func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
			for range maxBufferedOutput/len(chunk) + 2 {
				if err := out.Stdout(chunk); err != nil {
					return client.ExecResult{}, err
				}
			}
			if err := out.Stderr([]byte("done")); err != nil {
				return client.ExecResult{}, err
			}
			return client.ExecResult{ExitCode: 0}, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	res, err := c.Exec(testCtx(t), "sb", client.ExecRequest{Command: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != maxBufferedOutput {
		t.Fatalf("stdout is %d bytes, want exactly the %d-byte cap", len(res.Stdout), maxBufferedOutput)
	}
	if !bytes.Equal(res.Stdout[:len(chunk)], chunk) || !bytes.Equal(res.Stdout[len(res.Stdout)-2:], []byte("y\n")) {
		t.Fatal("stdout is not the first bytes the command wrote")
	}
	if string(res.Stderr) != "done" {
		t.Fatalf("stderr %q: the other stream has its own cap", res.Stderr)
	}
	if !res.Truncated {
		t.Fatal("Truncated is false for output past the cap")
	}
}

func TestBufferStreamOutputExactlyAtTheLimitIsNotTruncated(t *testing.T) {
	b := &bufferStream{limit: 5}
	_ = b.Stdout([]byte("123"))
	_ = b.Stdout([]byte("45"))
	_ = b.Stderr([]byte("abcde"))
	_ = b.Stdout(nil)
	stdout, stderr, truncated := b.close()
	if string(stdout) != "12345" || string(stderr) != "abcde" || truncated {
		t.Fatalf("got %q %q %v", stdout, stderr, truncated)
	}
}

func TestBufferStreamKeepsThePrefixOfAChunkThatCrossesTheLimit(t *testing.T) {
	b := &bufferStream{limit: 5}
	for _, s := range []string{"abc", "def", "ghi"} {
		if err := b.Stdout([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	_ = b.Stderr([]byte("12345"))
	stdout, stderr, truncated := b.close()
	if string(stdout) != "abcde" || string(stderr) != "12345" || !truncated {
		t.Fatalf("got %q %q %v", stdout, stderr, truncated)
	}
	if err := b.Stdout([]byte("x")); !errors.Is(err, errStreamClosed) {
		t.Fatalf("write after close: %v, want errStreamClosed", err)
	}
}

// lateWriterBackend returns a backend whose Exec returns at once but leaves
// a goroutine calling out.Stdout until stop is closed; the goroutine's last
// error is sent on result.
func lateWriterBackend(stop <-chan struct{}, result chan<- error) *fakeBackend {
	return &fakeBackend{
		ExecFunc: func(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error) {
			go func() {
				var err error
				for {
					select {
					case <-stop:
						// A few more writes, well after the handler returned.
						for range 20 {
							err = out.Stdout([]byte("late"))
							time.Sleep(time.Millisecond)
						}
						result <- err
						return
					default:
					}
					err = out.Stdout([]byte("late"))
					time.Sleep(100 * time.Microsecond)
				}
			}()
			return client.ExecResult{ExitCode: 0, Pid: 9}, nil
		},
	}
}

func TestExecStreamIgnoresWritesAfterTheHandlerReturned(t *testing.T) {
	stop := make(chan struct{})
	result := make(chan error, 1)
	c, _ := newTestServer(t, lateWriterBackend(stop, result), aliceKey)
	res, err := c.ExecStream(testCtx(t), "sb", client.ExecRequest{Command: []string{"x"}}, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pid != 9 {
		t.Fatalf("result %+v", res)
	}
	// The client has read the whole response, so the handler has returned.
	close(stop)
	select {
	case err := <-result:
		if !errors.Is(err, errStreamClosed) {
			t.Fatalf("write after the handler returned: %v, want errStreamClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("late writer never finished")
	}
}

func TestExecBufferedIgnoresWritesAfterExecReturned(t *testing.T) {
	stop := make(chan struct{})
	result := make(chan error, 1)
	c, _ := newTestServer(t, lateWriterBackend(stop, result), aliceKey)
	res, err := c.Exec(testCtx(t), "sb", client.ExecRequest{Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	select {
	case err := <-result:
		if !errors.Is(err, errStreamClosed) {
			t.Fatalf("write after Exec returned: %v, want errStreamClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("late writer never finished")
	}
	if len(res.Stdout)%len("late") != 0 || res.Truncated {
		t.Fatalf("result %+v", res)
	}
}

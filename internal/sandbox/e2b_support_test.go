package sandbox

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/store"
)

// collectStream gathers an exec's streamed output.
type collectStream struct {
	mu  sync.Mutex
	out strings.Builder
}

func (c *collectStream) Stdout(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.Write(p)
	return nil
}
func (c *collectStream) Stderr(p []byte) error { return c.Stdout(p) }
func (c *collectStream) String() string        { c.mu.Lock(); defer c.mu.Unlock(); return c.out.String() }

// TestExecInputWatchDirAndSampleResources: the three service calls the
// E2B API is served by: an exec whose stdin is written while it runs, a
// watch of a directory the sandbox changes, and a resource sample; each
// treats another tenant's sandbox as absent.
func TestExecInputWatchDirAndSampleResources(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "e2b"})
	if err != nil {
		t.Fatal(err)
	}

	// Input written while the command runs, then EOF.
	r, w := io.Pipe()
	out := &collectStream{}
	done := make(chan error, 1)
	go func() {
		res, err := s.ExecInput(ctx, store.DefaultTenant, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "read a; echo got $a; cat; echo end"}}, r, out)
		if err == nil && res.ExitCode != 0 {
			err = errors.New("exit " + res.Signal)
		}
		done <- err
	}()
	w.Write([]byte("one\n"))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "got one") {
		if time.Now().After(deadline) {
			t.Fatalf("no output for the first line: %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.Write([]byte("two\n"))
	w.Close()
	if err := <-done; err != nil || out.String() != "got one\ntwo\nend\n" {
		t.Fatalf("exec with input: %q %v", out.String(), err)
	}
	if _, err := s.ExecInput(ctx, "other", sb.ID, client.ExecRequest{Command: []string{"true"}}, strings.NewReader(""), out); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's exec with input: %v", err)
	}

	// A watch sees what the sandbox does.
	if _, err := s.Exec(ctx, store.DefaultTenant, sb.ID, client.ExecRequest{Command: []string{"mkdir", "-p", "/workspace/w"}}, nil); err != nil {
		t.Fatal(err)
	}
	wt, err := s.WatchDir(ctx, store.DefaultTenant, sb.ID, "/workspace/w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	if _, err := s.Exec(ctx, store.DefaultTenant, sb.ID, client.ExecRequest{Command: []string{"touch", "/workspace/w/made-inside"}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-wt.Events():
		if ev.Name != "made-inside" || ev.Op != files.WatchCreate {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for a file made inside the sandbox")
	}
	if _, err := s.WatchDir(ctx, "other", sb.ID, "/workspace/w", false); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's watch: %v", err)
	}

	// A resource sample of a running sandbox; none of a stopped one.
	rs, err := s.SampleResources(ctx, store.DefaultTenant, sb.ID)
	if err != nil || rs.MemoryBytes <= 0 || rs.CPUUsage <= 0 || rs.At.IsZero() {
		t.Fatalf("sample: %+v %v", rs, err)
	}
	if _, err := s.SampleResources(ctx, "other", sb.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's sample: %v", err)
	}
	if _, err := s.StopSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SampleResources(ctx, store.DefaultTenant, sb.ID); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("sample of a stopped sandbox: %v", err)
	}
}

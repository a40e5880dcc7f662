package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/agentlog"
	"github.com/stead-dev/stead/internal/api"
)

// logsBackend serves a real rotated log from a directory and records the
// creates and the log options it is asked for.
type logsBackend struct {
	*cliBackend
	dir     string
	mu      sync.Mutex
	created []client.CreateSandboxRequest
	opts    []client.LogOptions
}

func (b *logsBackend) CreateSandbox(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, req)
	return client.Sandbox{ID: "sb-9", Name: req.Name, Tenant: tenant, State: "running"}, nil
}

func (b *logsBackend) GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	sb, err := b.cliBackend.GetSandbox(ctx, tenant, id)
	keep := 4
	sb.Service = &client.Service{Command: []string{"agent"}, Restart: "always", Log: &client.LogConfig{MaxSize: "16MiB", Keep: &keep}}
	return sb, err
}

func (b *logsBackend) ReadAgentLog(ctx context.Context, _, _ string, opts client.LogOptions) (io.ReadCloser, error) {
	b.mu.Lock()
	b.opts = append(b.opts, opts)
	b.mu.Unlock()
	fd, err := unix.Open(b.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return agentlog.Open(ctx, fd, agentlog.ReadOptions{})
}

func TestLogsReadsAcrossRotatedFilesAndPassesSinceAndFollow(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := agentlog.OpenWriter(fd, agentlog.Config{MaxSize: agentlog.LineCap, Keep: 50}, agentlog.WriterOptions{UID: -1})
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 5000 { // several rotated, compressed files
		line := fmt.Sprintf("line %d of the agent's output\n", i)
		want.WriteString(line)
		w.Write([]byte(line))
	}
	w.Close()
	b := &logsBackend{cliBackend: &cliBackend{}, dir: dir}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	code, out, errOut := stead(t, srv, "logs", "agent-1", "--since", "10m")
	if code != exitOK || out != want.String() {
		t.Fatalf("exit %d (%s); %d bytes of %d", code, errOut, len(out), want.Len())
	}
	if len(b.opts) != 1 || b.opts[0].Since != "10m" || b.opts[0].Follow {
		t.Fatalf("options %+v", b.opts)
	}

	code, _, errOut = stead(t, srv, "create", "agent-2", "--log-max-size", "16MiB", "--log-keep", "4", "--", "agent")
	if code != exitOK {
		t.Fatalf("create: %d %s", code, errOut)
	}
	if c := b.created[0]; c.Service == nil || c.Service.Log == nil || c.Service.Log.MaxSize != "16MiB" || *c.Service.Log.Keep != 4 {
		t.Fatalf("create request %+v", c.Service)
	}
	if code, _, _ := stead(t, srv, "create", "agent-3", "--log-keep", "2"); code != exitUsage {
		t.Fatalf("log flags without a service: exit %d", code)
	}
	if code, _, _ := stead(t, srv, "create", "agent-3", "--log-keep", "101", "--", "agent"); code != exitError {
		t.Fatalf("keep 101: exit %d", code)
	}
	code, out, _ = stead(t, srv, "info", "agent-1")
	if code != exitOK || !strings.Contains(out, "at 16MiB, 4 kept") {
		t.Fatalf("info: %d\n%s", code, out)
	}
}

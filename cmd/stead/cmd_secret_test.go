package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// secretBackend is an in-memory api.SecretBackend for the CLI tests; the
// secret USED is referenced by sandbox agent-1. CreateSandbox records its
// request.
type secretBackend struct {
	*cliBackend
	mu      sync.Mutex
	values  map[string]string
	created []client.CreateSandboxRequest
}

var _ api.SecretBackend = (*secretBackend)(nil)

func (b *secretBackend) SetSecret(_ context.Context, _, name, value string) (client.Secret, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t0 := time.Now().Add(-time.Hour)
	s := client.Secret{Name: name, CreatedAt: t0, UpdatedAt: t0, UsedBy: []string{}}
	if _, ok := b.values[name]; ok {
		s.UpdatedAt = time.Now()
	}
	if name == "USED" {
		s.UsedBy = []string{"agent-1"}
	}
	b.values[name] = value
	return s, nil
}

func (b *secretBackend) ListSecrets(context.Context, string) ([]client.Secret, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []client.Secret
	for n := range b.values {
		s := client.Secret{Name: n, CreatedAt: time.Now(), UpdatedAt: time.Now(), UsedBy: []string{}}
		if n == "USED" {
			s.UsedBy = []string{"agent-1"}
		}
		out = append(out, s)
	}
	return out, nil
}

func (b *secretBackend) DeleteSecret(_ context.Context, _, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch _, ok := b.values[name]; {
	case !ok:
		return fmt.Errorf("secret %s: %w", name, errs.ErrNotFound)
	case name == "USED":
		return fmt.Errorf("secret USED is referenced by sandbox agent-1: %w", errs.ErrConflict)
	}
	delete(b.values, name)
	return nil
}

func (b *secretBackend) CreateSandbox(_ context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, req)
	return client.Sandbox{ID: "sb-1", Name: req.Name, Tenant: tenant, State: "running"}, nil
}

func (b *secretBackend) GetSandbox(_ context.Context, tenant, id string) (client.Sandbox, error) {
	return client.Sandbox{ID: "sb-1", Name: id, State: "running", Tenant: tenant,
		Secrets: []client.SecretRef{{Name: "USED", Env: "OTHER"}, {Name: "USED", File: "/run/secrets/u"}}}, nil
}

// TestSecretCommands: set reads stdin (one trailing newline dropped) or a
// file (byte for byte), never prints the value; ls shows names and users;
// rm of a secret in use exits 4 naming the sandbox; create passes
// --secret and --secret-file; info shows the references.
func TestSecretCommands(t *testing.T) {
	b := &secretBackend{cliBackend: &cliBackend{}, values: map[string]string{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	code, out, errOut := steadIn(t, srv, "sk-cli-1\n", "secret", "set", "OPENAI_API_KEY")
	if code != exitOK || out != "secret OPENAI_API_KEY set\n" || b.values["OPENAI_API_KEY"] != "sk-cli-1" {
		t.Fatalf("set from stdin: exit %d %q %q, stored %q", code, out, errOut, b.values["OPENAI_API_KEY"])
	}
	if code, out, _ := steadIn(t, srv, "sk-cli-2", "secret", "set", "OPENAI_API_KEY"); code != exitOK || !strings.Contains(out, "rotated") || strings.Contains(out, "sk-cli") {
		t.Fatalf("rotate: exit %d %q", code, out)
	}
	f := filepath.Join(t.TempDir(), "key")
	os.WriteFile(f, []byte("line1\nline2\n"), 0o600)
	if code, _, errOut := stead(t, srv, "secret", "set", "USED", "--from-file", f); code != exitOK || b.values["USED"] != "line1\nline2\n" {
		t.Fatalf("set from a file: exit %d %q, stored %q", code, errOut, b.values["USED"])
	}
	if code, _, errOut := steadIn(t, srv, "", "secret", "set", "EMPTY"); code != exitUsage || !strings.Contains(errOut, "no value") {
		t.Fatalf("set without a value: exit %d %q", code, errOut)
	}
	code, out, _ = stead(t, srv, "secret", "ls")
	if code != exitOK || !strings.Contains(out, "OPENAI_API_KEY") || !strings.Contains(out, "agent-1") || strings.Contains(out, "sk-cli") {
		t.Fatalf("ls: exit %d %q", code, out)
	}
	if code, _, errOut := stead(t, srv, "secret", "rm", "USED"); code != exitConflict || !strings.Contains(errOut, "agent-1") {
		t.Fatalf("rm in use: exit %d %q", code, errOut)
	}
	if code, out, _ := stead(t, srv, "secret", "rm", "OPENAI_API_KEY"); code != exitOK || out != "secret OPENAI_API_KEY deleted\n" {
		t.Fatalf("rm: exit %d %q", code, out)
	}
	if code, _, _ := stead(t, srv, "secret", "rm", "OPENAI_API_KEY"); code != exitNotFound {
		t.Fatalf("rm twice: exit %d", code)
	}
	if code, _, errOut := stead(t, srv, "create", "agent-2", "--secret", "USED", "--secret", "USED=OTHER", "--secret-file", "USED=/run/secrets/u"); code != exitOK {
		t.Fatalf("create: exit %d %q", code, errOut)
	}
	req := b.created[len(b.created)-1]
	if strings.Join(req.Secrets, ",") != "USED,USED=OTHER" || strings.Join(req.SecretFiles, ",") != "USED=/run/secrets/u" {
		t.Fatalf("create sent %+v", req)
	}
	if code, out, _ := stead(t, srv, "info", "agent-2"); code != exitOK || !strings.Contains(out, "USED as $OTHER") || !strings.Contains(out, "USED in /run/secrets/u") {
		t.Fatalf("info: exit %d %q", code, out)
	}
}

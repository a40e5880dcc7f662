package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func TestListTemplatesShowsHostBeforeFirstUse(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	list, err := s.ListTemplates(ctx, "fresh-tenant")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "host" || list[0].Kind != "host" || !list[0].OnDemand {
		t.Fatalf("fresh list %+v, want only host, on demand", list)
	}
	if err := s.DeleteTemplate(ctx, store.DefaultTenant, "host"); !errors.Is(err, errs.ErrNotFound) || !strings.Contains(err.Error(), "not built yet") {
		t.Fatalf("delete unbuilt host: %v", err)
	}
	if _, err := s.ensureHostTemplate(ctx, store.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	list, err = s.ListTemplates(ctx, store.DefaultTenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "host" || list[0].OnDemand || list[0].CreatedAt.IsZero() {
		t.Fatalf("list after first use %+v, want the built host once", list)
	}
}

func TestExecMissingProgramExits127AndBadCwdNamesTheDirectory(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "ux"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Exec(ctx, store.DefaultTenant, "ux", client.ExecRequest{Command: []string{"nope"}}, nil)
	if err != nil || res.ExitCode != 127 || string(res.Stderr) != "stead: exec: \"nope\": executable file not found in $PATH\n" {
		t.Fatalf("exec nope: %+v (stderr %q), %v; want exit 127", res, res.Stderr, err)
	}
	res, err = s.Exec(ctx, store.DefaultTenant, "ux", client.ExecRequest{Command: []string{"/etc/hostname"}}, nil)
	if err != nil || res.ExitCode != 126 || !strings.Contains(string(res.Stderr), "permission denied") {
		t.Fatalf("exec /etc/hostname: %+v (stderr %q), %v; want exit 126", res, res.Stderr, err)
	}
	res, err = s.Exec(ctx, store.DefaultTenant, "ux", client.ExecRequest{Command: []string{"nope"}, Background: true}, nil)
	if err != nil || res.ExitCode != 127 || res.Pid != 0 || !strings.Contains(string(res.Stderr), "executable file not found") {
		t.Fatalf("exec nope in the background: %+v, %v; want exit 127", res, err)
	}
	_, err = s.Exec(ctx, store.DefaultTenant, "ux", client.ExecRequest{Command: []string{"ls"}, Cwd: "/nope"}, nil)
	if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "cwd /nope: no such directory") || strings.Contains(err.Error(), "ls") {
		t.Fatalf("exec in /nope: %v; want invalid naming the directory", err)
	}
}

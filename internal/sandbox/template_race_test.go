package sandbox

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store/sqlite"
	"github.com/stead-dev/stead/internal/template"
)

// Two nodes whose first creates of a tenant race both build the tenant's
// host template in their own pools; one records it first. The other keeps
// its build as that template's data here and its create succeeds.
func TestNodesRacingToBuildTheHostTemplateBothKeepTheirBuild(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s1 := newNodeService(t, st, nodeLeases(t, st, "n1"))
	s2 := newNodeService(t, st, nodeLeases(t, st, "n2"))
	tn := "default"
	// The race, in the order that lost it: n1 records the template
	// while n2 is building its own.
	if _, err := s1.ensureHostTemplate(ctx, tn); err != nil {
		t.Fatal(err)
	}
	got, err := s2.buildTemplate(ctx, tn, "host", "host", "host", func(dst string) (template.ImageInfo, error) {
		return template.ImageInfo{}, template.BuildHost(ctx, dst)
	})
	if err != nil || got.ID != "host" {
		t.Fatalf("the node that recorded second: %+v %v", got, err)
	}
	if ok, err := s2.pool.Exists(ctx, templateDataset(tn, "host")); err != nil || !ok {
		t.Fatalf("its build was not kept: %v %v", ok, err)
	}
	// Both nodes create from it.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*Service{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: []string{"a", "b"}[i]})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create on n%d: %v", i+1, err)
		}
	}
	if list, err := st.ListTemplates(ctx, tn); err != nil || len(list) != 1 {
		t.Fatalf("templates: %v %v", list, err)
	}
}

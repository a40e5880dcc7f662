package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/names"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/template"
)

func templateView(t store.Template) client.Template {
	return client.Template{ID: t.ID, Kind: t.Kind, Source: t.Source, Digest: t.Digest, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt}
}

// templateDataset names a template's dataset. Templates of the default
// tenant keep their plain id; others get a fixed-length prefix derived
// from the tenant, so two tenants' names can never collide.
func templateDataset(tenant, id string) string {
	return pool.KindTemplate + "/" + cluster.TemplateDataset(tenant, id)
}

// tenantTemplatePrefix reports whether id starts like the dataset id of
// another tenant's template: "t", 16 hex digits, "-".
func tenantTemplatePrefix(id string) bool {
	if len(id) < 18 || id[0] != 't' || id[17] != '-' {
		return false
	}
	for _, c := range id[1:17] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ensureHostTemplate builds the host template (a skeleton root with a copy
// of /etc; /usr comes read-only from the host at run time).
func (s *Service) ensureHostTemplate(ctx context.Context, tenant string) (store.Template, error) {
	unlock := s.lock("template/" + tenant + "/host")
	defer unlock()
	if t, err := s.st.GetTemplate(ctx, tenant, "host"); err == nil {
		return t, nil
	}
	return s.buildTemplate(ctx, tenant, "host", "host", "host", func(dst string) (template.ImageInfo, error) {
		return template.ImageInfo{}, template.BuildHost(ctx, dst)
	})
}

// templateHere makes sure template t's dataset is in this node's pool. In
// a cluster the record is shared and the data is not: a node that never
// had the host template builds it from its own host (as the first node
// did); a template imported on another node must be imported here too.
func (s *Service) templateHere(ctx context.Context, t store.Template) error {
	ds := templateDataset(t.TenantID, t.ID)
	if ok, err := s.pool.Exists(ctx, ds); err != nil || ok {
		return err
	}
	if t.Kind != "host" {
		return fmt.Errorf("template %s was made on another node and its files are not on this one (import it here as well: stead template create): %w", t.ID, errs.ErrNotFound)
	}
	unlock := s.lock("template/" + t.TenantID + "/host")
	defer unlock()
	if ok, _ := s.pool.Exists(ctx, ds); ok {
		return nil
	}
	defer s.templateChanging(ctx, ds)() // spares.go
	if err := s.pool.Create(ctx, ds); err != nil {
		return fmt.Errorf("build template %s here: %w", t.ID, err)
	}
	err := template.BuildHost(ctx, s.pool.Path(ds))
	if err == nil {
		err = s.pool.SetReadOnly(ctx, ds, true)
	}
	if err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), ds)
		return fmt.Errorf("build template %s here: %w", t.ID, err)
	}
	s.log.Info("host template built on this node (its record came from another)", "tenant", t.TenantID)
	return nil
}

// buildTemplate fills a new read-only template dataset with fill and
// records it. A failure leaves neither dataset nor record.
func (s *Service) buildTemplate(ctx context.Context, tenant, id, kind, source string, fill func(dst string) (template.ImageInfo, error)) (store.Template, error) {
	ds := templateDataset(tenant, id)
	defer s.templateChanging(ctx, ds)() // spares.go
	if ex, _ := s.pool.Exists(ctx, ds); ex {
		// Left by a crash before the record was written.
		s.pool.Delete(ctx, ds)
	}
	if err := s.pool.Create(ctx, ds); err != nil {
		return store.Template{}, fmt.Errorf("create template %s: %w", id, err)
	}
	info, err := fill(s.pool.Path(ds))
	if err == nil {
		err = s.pool.SetReadOnly(ctx, ds, true)
	}
	var size int64
	if err == nil {
		size, _ = s.pool.Usage(ctx, ds)
	}
	t := store.Template{ID: id, TenantID: tenant, Kind: kind, Source: source, Digest: info.Digest, SizeBytes: size, CreatedAt: s.now()}
	if err == nil {
		t.Config, _ = json.Marshal(info)
		err = s.st.CreateTemplate(ctx, t)
		if kind == "host" && errors.Is(err, errs.ErrConflict) {
			// Another node recorded the tenant's host template while this
			// one built its own (their first creates raced): the record
			// is shared, the data is per node, so this build is that
			// template's data here.
			if got, gerr := s.st.GetTemplate(ctx, tenant, id); gerr == nil && got.Kind == "host" {
				s.log.Info("host template built on this node; another node recorded it first", "tenant", tenant)
				return got, nil
			}
		}
	}
	if err != nil {
		s.pool.Delete(context.WithoutCancel(ctx), ds)
		return store.Template{}, fmt.Errorf("create template %s: %w", id, err)
	}
	s.log.Info("template created", "template", id, "tenant", tenant, "kind", kind, "bytes", size)
	return t, nil
}

// ListTemplates lists a tenant's templates.
func (s *Service) ListTemplates(ctx context.Context, tenant string) ([]client.Template, error) {
	list, err := s.st.ListTemplates(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := make([]client.Template, 0, len(list)+1)
	for _, t := range list {
		out = append(out, templateView(t))
	}
	return withHostTemplate(out), nil
}

// withHostTemplate adds the host template to a tenant's list before its
// first use: every tenant has it, and the first create from it builds it
// (ensureHostTemplate), so a fresh daemon lists what it can create from.
func withHostTemplate(list []client.Template) []client.Template {
	for _, t := range list {
		if t.ID == "host" {
			return list
		}
	}
	// First, as the store orders by creation and it is not made yet.
	return slices.Insert(list, 0, client.Template{ID: "host", Kind: "host", Source: "host", OnDemand: true})
}

// ImportTemplate imports an OCI image as a template. Only admin keys may:
// the source names a path on the daemon's host or a registry the daemon
// will contact. (Direct calls without an API principal are trusted.)
func (s *Service) ImportTemplate(ctx context.Context, tenant string, req client.ImportTemplateRequest) (client.Template, error) {
	if p, ok := api.PrincipalFromContext(ctx); ok && !p.Admin {
		return client.Template{}, fmt.Errorf("importing templates needs an admin key (the source is read by the daemon's host): %w", errs.ErrForbidden)
	}
	if !pool.ValidID(req.ID) || req.ID == "host" {
		return client.Template{}, fmt.Errorf("template id %q (lowercase letters, digits, . _ -; not host): %w", req.ID, errs.ErrInvalid)
	}
	if names.LooksLikeID(req.ID) || tenantTemplatePrefix(req.ID) {
		// The second form is how other tenants' template datasets are
		// named (templateDataset): such an id would collide with one.
		return client.Template{}, fmt.Errorf("template id %q has the form of an id stead makes (%s..., or t + 16 hex digits + -): choose another: %w", req.ID, strings.Join(names.IDPrefixes, "..., "), errs.ErrInvalid)
	}
	if req.Source == "" {
		return client.Template{}, fmt.Errorf("template source is empty: %w", errs.ErrInvalid)
	}
	if err := checkStrings("template source", req.Source); err != nil {
		return client.Template{}, err // it names a path or a registry: no NUL byte
	}
	unlock := s.lock("template/" + tenant + "/" + req.ID)
	defer unlock()
	if _, err := s.st.GetTemplate(ctx, tenant, req.ID); err == nil {
		return client.Template{}, fmt.Errorf("template %s exists: %w", req.ID, errs.ErrConflict)
	}
	t, err := s.buildTemplate(ctx, tenant, req.ID, "oci", req.Source, func(dst string) (template.ImageInfo, error) {
		return template.ImportOCI(ctx, req.Source, dst, nil)
	})
	if err != nil {
		return client.Template{}, err
	}
	return templateView(t), nil
}

// DeleteTemplate removes a template no sandbox uses.
func (s *Service) DeleteTemplate(ctx context.Context, tenant, id string) error {
	if _, err := s.st.GetTemplate(ctx, tenant, id); errors.Is(err, errs.ErrNotFound) && id == "host" {
		return fmt.Errorf("template host is not built yet (the first create from it builds it): nothing to delete: %w", errs.ErrNotFound)
	} else if errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("template %s: %w (stead template ls shows the templates)", id, errs.ErrNotFound)
	} else if err != nil {
		return err // the store's error names the template
	}
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant, IncludeDeleted: true})
	if err != nil {
		return err
	}
	for _, sb := range list {
		if sb.TemplateID == id {
			return fmt.Errorf("template %s is used by sandbox %s: %w", id, sb.Name, errs.ErrConflict)
		}
	}
	defer s.templateChanging(ctx, templateDataset(tenant, id))() // spares.go
	if err := s.st.DeleteTemplate(ctx, tenant, id); err != nil {
		return fmt.Errorf("delete template %s: %w", id, err)
	}
	if err := s.pool.Delete(ctx, templateDataset(tenant, id)); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return fmt.Errorf("delete template %s: %w", id, err)
	}
	return nil
}

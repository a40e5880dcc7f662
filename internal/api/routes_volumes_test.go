package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

func TestVolumeRoutesPassTheirArguments(t *testing.T) {
	var mu sync.Mutex
	var createReq client.CreateVolumeRequest
	var listAll []bool
	var delID string
	var delPurge []bool
	purgeAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	fb := &fakeBackend{
		CreateVolumeFunc: func(_ context.Context, tenant string, req client.CreateVolumeRequest) (client.Volume, error) {
			mu.Lock()
			defer mu.Unlock()
			createReq = req
			return client.Volume{ID: "vol-9", Name: req.Name, Tenant: tenant, SizeBytes: req.SizeBytes, State: "available"}, nil
		},
		ListVolumesFunc: func(_ context.Context, tenant string, all bool) ([]client.Volume, error) {
			mu.Lock()
			defer mu.Unlock()
			listAll = append(listAll, all)
			return []client.Volume{{ID: "vol-1", Name: "a", AttachedTo: []string{"sb-1", "sb-2"}}, {ID: "vol-2", Name: "b"}}, nil
		},
		DeleteVolumeFunc: func(_ context.Context, tenant, id string, purge bool) (client.Volume, error) {
			mu.Lock()
			defer mu.Unlock()
			delID = id
			delPurge = append(delPurge, purge)
			return client.Volume{ID: "vol-9", Name: id, State: "deleted", PurgeAt: &purgeAt}, nil
		},
	}
	c, srv := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)

	v, err := c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "shared", SizeBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != "vol-9" || v.Name != "shared" || v.Tenant != "t-alice" || v.SizeBytes != 512<<20 {
		t.Errorf("create returned %+v", v)
	}
	for _, all := range []bool{false, true} {
		list, err := c.ListVolumes(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || strings.Join(list[0].AttachedTo, ",") != "sb-1,sb-2" {
			t.Errorf("list returned %+v", list)
		}
	}
	for _, purge := range []bool{false, true} {
		v, err = c.DeleteVolume(ctx, "shared", purge)
		if err != nil {
			t.Fatal(err)
		}
		if v.State != "deleted" || v.PurgeAt == nil || !v.PurgeAt.Equal(purgeAt) {
			t.Errorf("delete returned %+v", v)
		}
	}
	v, err = c.GetVolume(ctx, "with space")
	if err != nil || v.Name != "with space" {
		t.Errorf("get: %+v %v", v, err)
	}
	v, err = c.UndeleteVolume(ctx, "vol-9")
	if err != nil || v.Name != "vol-9" || v.State != "available" {
		t.Errorf("undelete: %+v %v", v, err)
	}
	mu.Lock()
	if createReq.Name != "shared" || createReq.SizeBytes != 512<<20 {
		t.Errorf("create got %+v", createReq)
	}
	if fmt.Sprint(listAll) != "[false true]" {
		t.Errorf("list got all=%v", listAll)
	}
	if delID != "shared" || fmt.Sprint(delPurge) != "[false true]" {
		t.Errorf("delete got %q purge=%v", delID, delPurge)
	}
	mu.Unlock()
	var ids []string
	for _, call := range fb.Calls() {
		if call.Method == "GetVolume" || call.Method == "UndeleteVolume" {
			ids = append(ids, call.ID)
		}
	}
	if strings.Join(ids, ",") != "with space,vol-9" {
		t.Errorf("path ids %q", ids)
	}

	// A list of none is [], not null; the wire names are the documented ones.
	fb.ListVolumesFunc = nil
	if raw := doRaw(t, srv, http.MethodGet, "/v1/volumes", "", http.StatusOK); strings.TrimSpace(raw) != emptyPage {
		t.Errorf("empty list %q, want []", raw)
	}
	raw := doRaw(t, srv, http.MethodPost, "/v1/volumes", `{"name":"x","size_bytes":1024}`, http.StatusCreated)
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m["id"] != "vol-9" || m["size_bytes"] != float64(1024) || m["state"] != "available" {
		t.Errorf("create body %s", raw)
	}
	doRaw(t, srv, http.MethodPost, "/v1/volumes", `{"name":"x"}`, http.StatusCreated) // size defaults (backend's job)
	doRaw(t, srv, http.MethodDelete, "/v1/volumes/x?purge=true", "", http.StatusOK)
	doRaw(t, srv, http.MethodGet, "/v1/volumes?all=true", "", http.StatusOK)
}

func TestVolumeRequestsAreValidatedBeforeTheBackend(t *testing.T) {
	fb := &fakeBackend{}
	c, srv := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)
	for _, req := range []client.CreateVolumeRequest{
		{Name: ""},
		{Name: strings.Repeat("x", 64)},
		{Name: "ok", SizeBytes: -1},
	} {
		if _, err := c.CreateVolume(ctx, req); !client.IsInvalid(err) {
			t.Errorf("create %+v: %v, want 4xx invalid", req, err)
		}
	}
	if _, err := c.GetVolume(ctx, strings.Repeat("v", 129)); !client.IsInvalid(err) {
		t.Errorf("129-character id: %v, want 4xx invalid", err)
	}
	doRaw(t, srv, http.MethodPost, "/v1/volumes", "", http.StatusBadRequest) // the body is required
	doRaw(t, srv, http.MethodDelete, "/v1/volumes/x?purge=maybe", "", http.StatusUnprocessableEntity)
	if calls := fb.Calls(); len(calls) != 0 {
		t.Fatalf("backend called with refused requests: %v", calls)
	}
}

func TestVolumeErrorsMapToStatusCodes(t *testing.T) {
	cases := []struct {
		err    error
		status int
	}{
		{fmt.Errorf("volume shared: %w", errs.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("delete volume shared: used by sandbox sb-1: %w", errs.ErrConflict), http.StatusConflict},
		{fmt.Errorf("volume name -x: %w", errs.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("volume: pool full: %w", errs.ErrQuota), http.StatusInsufficientStorage},
		{fmt.Errorf("volume quota on ext4: %w", errs.ErrUnsupported), http.StatusNotImplemented},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			c, _ := newTestServer(t, &fakeBackend{Err: tc.err}, aliceKey)
			var n int
			for _, r := range allRoutes() {
				if !strings.Contains(r.name, "volume") {
					continue
				}
				n++
				err := r.call(testCtx(t), c)
				if client.StatusCode(err) != tc.status {
					t.Errorf("%s: %v, want %d", r.name, err, tc.status)
				}
				if !strings.Contains(err.Error(), strings.SplitN(tc.err.Error(), ":", 2)[0]) {
					t.Errorf("%s: %q does not carry the backend's message", r.name, err)
				}
			}
			if n != 7 {
				t.Fatalf("%d volume routes in allRoutes, want 7", n)
			}
		})
	}
}

func TestVolumesOfAnotherTenantAre404(t *testing.T) {
	// Alice's tenant owns volume "mine"; the fake refuses everything else
	// as absent.
	owned := func(tenant, id string) error {
		if tenant != "t-alice" || id != "mine" {
			return fmt.Errorf("volume %s: %w", id, errs.ErrNotFound)
		}
		return nil
	}
	fb := &fakeBackend{
		GetVolumeFunc: func(_ context.Context, tenant, id string) (client.Volume, error) {
			return client.Volume{Name: id}, owned(tenant, id)
		},
		DeleteVolumeFunc: func(_ context.Context, tenant, id string, _ bool) (client.Volume, error) {
			return client.Volume{Name: id}, owned(tenant, id)
		},
		UndeleteVolumeFunc: func(_ context.Context, tenant, id string) (client.Volume, error) {
			return client.Volume{Name: id}, owned(tenant, id)
		},
		ListVolumesFunc: func(_ context.Context, tenant string, _ bool) ([]client.Volume, error) {
			if tenant != "t-alice" {
				return nil, nil
			}
			return []client.Volume{{Name: "mine"}}, nil
		},
	}
	alice, srv := newTestServer(t, fb, aliceKey)
	admin, err := client.New(srv.URL, adminKey) // tenant t-admin
	if err != nil {
		t.Fatal(err)
	}
	calls := []func(ctx context.Context, c *client.Client) error{
		func(ctx context.Context, c *client.Client) error { _, err := c.GetVolume(ctx, "mine"); return err },
		func(ctx context.Context, c *client.Client) error {
			_, err := c.DeleteVolume(ctx, "mine", false)
			return err
		},
		func(ctx context.Context, c *client.Client) error {
			_, err := c.DeleteVolume(ctx, "mine", true)
			return err
		},
		func(ctx context.Context, c *client.Client) error { _, err := c.UndeleteVolume(ctx, "mine"); return err },
	}
	for i, call := range calls {
		if err := call(testCtx(t), alice); err != nil {
			t.Errorf("call %d by the owner: %v", i, err)
		}
		if err := call(testCtx(t), admin); !client.IsNotFound(err) {
			t.Errorf("call %d from another tenant: %v, want 404", i, err)
		}
	}
	if list, err := admin.ListVolumes(testCtx(t), true); err != nil || len(list) != 0 {
		t.Errorf("another tenant lists %+v, %v", list, err)
	}
}

// volumeOnlyBackend implements VolumeBackend but neither CheckpointBackend
// nor SnapshotBackend.
type volumeOnlyBackend struct {
	Backend
	VolumeBackend
}

func TestVolumeRoutesNeedAVolumeBackend(t *testing.T) {
	fb := &fakeBackend{}
	newServer := func(b Backend) (*client.Client, []byte) {
		srv := httptest.NewServer(NewHandler(b, Options{Logger: slog.New(slog.DiscardHandler)}))
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, aliceKey)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := c.OpenAPI(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return c, doc
	}

	c, doc := newServer(plainBackend{fb})
	if _, err := c.ListVolumes(testCtx(t), false); !client.IsNotFound(err) {
		t.Fatalf("list volumes without a VolumeBackend: %v, want 404", err)
	}
	if _, err := c.CreateVolume(testCtx(t), client.CreateVolumeRequest{Name: "x"}); !client.IsNotFound(err) && client.StatusCode(err) != http.StatusMethodNotAllowed {
		t.Fatalf("create volume without a VolumeBackend: %v, want 404 or 405", err)
	}
	if bytes.Contains(doc, []byte(`"/v1/volumes`)) {
		t.Errorf("OpenAPI document lists /v1/volumes, which the backend cannot serve")
	}
	for _, call := range fb.Calls() {
		if strings.Contains(call.Method, "Volume") {
			t.Fatalf("backend's %s called through a Backend without VolumeBackend", call.Method)
		}
	}

	// The volume routes depend on neither the checkpoint nor the snapshot ones.
	c, doc = newServer(volumeOnlyBackend{fb, fb})
	if _, err := c.ListVolumes(testCtx(t), true); err != nil {
		t.Fatalf("list volumes: %v", err)
	}
	if bytes.Contains(doc, []byte("/checkpoints")) || bytes.Contains(doc, []byte("/v1/snapshots")) ||
		!bytes.Contains(doc, []byte(`"/v1/volumes/{id}/undelete"`)) {
		t.Errorf("OpenAPI document of a volume-only backend is wrong")
	}
}

func TestVolumeOperationsAreTaggedAndDescribed(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, "")
	resp, err := http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string   `json:"operationId"`
			Summary     string   `json:"summary"`
			Description string   `json:"description"`
			Tags        []string `json:"tags"`
			Responses   map[string]json.RawMessage
		} `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{
		"POST /v1/volumes": true, "GET /v1/volumes": true, "GET /v1/volumes/{id}": false,
		"DELETE /v1/volumes/{id}": true, "POST /v1/volumes/{id}/undelete": true,
	}
	for w, wantDesc := range ops {
		method, path, _ := strings.Cut(w, " ")
		o, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s missing", w)
			continue
		}
		if len(o.Tags) != 1 || o.Tags[0] != "volumes" || o.Summary == "" {
			t.Errorf("%s: tags %v summary %q", w, o.Tags, o.Summary)
		}
		if wantDesc && len(o.Description) < 80 {
			t.Errorf("%s: description %q too thin", w, o.Description)
		}
	}
	del := doc.Paths["/v1/volumes/{id}"]["delete"]
	for _, want := range []string{"409", "purge", "never deletes"} {
		if !strings.Contains(del.Description, want) {
			t.Errorf("delete-volume description does not mention %q: %s", want, del.Description)
		}
	}
	if _, ok := del.Responses["409"]; !ok {
		t.Errorf("delete-volume does not declare 409")
	}
	if _, ok := doc.Paths["/v1/volumes"]["post"].Responses["201"]; !ok {
		t.Errorf("create-volume does not declare 201")
	}
}

// TestAttachDetachRoutesPassTheirArgumentsAndAreClosedToSandboxTokens: the
// attach and detach routes hand the backend the tenant, the sandbox, the
// mount and the path; the backend's conflict is a 409 and a missing mount a
// 404; a sandbox's own token cannot change its mounts.
func TestAttachDetachRoutesPassTheirArgumentsAndAreClosedToSandboxTokens(t *testing.T) {
	var mu sync.Mutex
	var gotMount client.VolumeMount
	var gotPath, gotTenant, gotSandbox string
	fb := &fakeBackend{
		AttachVolumeFunc: func(_ context.Context, tenant, sb string, m client.VolumeMount) (client.Sandbox, error) {
			mu.Lock()
			defer mu.Unlock()
			gotTenant, gotSandbox, gotMount = tenant, sb, m
			if sb == "busy" {
				return client.Sandbox{}, fmt.Errorf("attach a volume to sandbox busy: it is running: stop it first: %w", errs.ErrConflict)
			}
			return client.Sandbox{ID: "sb-1", Name: sb, Volumes: []client.VolumeMount{m}}, nil
		},
		DetachVolumeFunc: func(_ context.Context, tenant, sb, path string) (client.Sandbox, error) {
			mu.Lock()
			defer mu.Unlock()
			gotTenant, gotSandbox, gotPath = tenant, sb, path
			if path != "/data" {
				return client.Sandbox{}, fmt.Errorf("no volume mounted at %s: %w", path, errs.ErrNotFound)
			}
			return client.Sandbox{ID: "sb-1", Name: sb}, nil
		},
	}
	c, _ := newTestServer(t, fb, aliceKey)
	ctx := testCtx(t)
	want := client.VolumeMount{Volume: "shared", SubPath: "a/b", Path: "/data", ReadOnly: true}
	sb, err := c.AttachVolume(ctx, "agent", want)
	if err != nil || len(sb.Volumes) != 1 || sb.Volumes[0] != want {
		t.Fatalf("attach: %+v %v", sb, err)
	}
	if gotTenant != "t-alice" || gotSandbox != "agent" || gotMount != want {
		t.Fatalf("attach reached the backend as %s %s %+v", gotTenant, gotSandbox, gotMount)
	}
	if _, err := c.AttachVolume(ctx, "busy", want); !client.IsConflict(err) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("attach to a running sandbox: %v", err)
	}
	if _, err := c.DetachVolume(ctx, "agent", "/data"); err != nil || gotPath != "/data" || gotSandbox != "agent" {
		t.Fatalf("detach: %v (path %q)", err, gotPath)
	}
	if _, err := c.DetachVolume(ctx, "agent", "/nothing"); !client.IsNotFound(err) {
		t.Fatalf("detach of no mount: %v", err)
	}

	fb.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}
	agent, _ := newTestServer(t, fb, aliceKey)
	gotSandbox = ""
	if _, err := agent.AttachVolume(ctx, "sb-1", want); client.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("a sandbox token attaches: %v", err)
	}
	if _, err := agent.DetachVolume(ctx, "sb-1", "/data"); client.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("a sandbox token detaches: %v", err)
	}
	if gotSandbox != "" {
		t.Fatal("the backend was called for a sandbox token")
	}
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// keyClient returns a client of d authenticating with secret.
func keyClient(t *testing.T, d *daemon, secret string) *client.Client {
	t.Helper()
	c, err := client.New("http://"+d.addr, secret)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawAnswer is the status and the problem detail of one raw request.
type rawAnswer struct {
	status int
	detail string
}

// rawCall sends method path with key and an empty JSON object as the body
// of a write.
func rawCall(t *testing.T, d *daemon, key, method, path string) rawAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var p struct{ Detail string }
	_ = json.Unmarshal(raw, &p)
	return rawAnswer{resp.StatusCode, p.Detail}
}

// TestTenantsAreIsolatedByRoleAndDeletionErasesPushedData is issue 12's
// tenant part on a real daemon: a second tenant with keys of each role;
// every route of the daemon's OpenAPI document that takes an id answers
// another tenant's id exactly as a missing one; roles and scopes hold;
// suspension refuses the tenant's keys and stops its sandboxes; rotation
// ends the old secret after the overlap; and deleting the tenant makes its
// pushed data unreadable (a restore fails, even with its objects put back)
// while the default tenant's push still restores.
func TestTenantsAreIsolatedByRoleAndDeletionErasesPushedData(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	d := newDaemon(t, "--repo", repoDir)
	ctx := ctxT(t)
	admin := d.c
	if _, err := admin.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}

	// The default tenant's things, the foreign ids of the walk below.
	home, err := admin.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "home"})
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, home.ID, "agent", "echo default-notes > /workspace/notes.md")
	var homePush client.PushResult
	op, err := admin.Push(ctx, home.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, &homePush)
	homeVol, err := admin.CreateVolume(ctx, client.CreateVolumeRequest{Name: "homevol"})
	if err != nil {
		t.Fatal(err)
	}
	homeSnap, err := admin.CreateSnapshot(ctx, home.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}

	// A second tenant and keys of each role.
	if _, err := admin.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	ak, err := admin.WithTenant("acme").CreateKey(ctx, client.CreateAPIKeyRequest{Name: "ops", Role: client.RoleTenantAdmin})
	if err != nil || ak.Tenant != "acme" {
		t.Fatalf("acme's first key: %+v %v", ak, err)
	}
	acmeAdmin := keyClient(t, d, ak.Secret)
	mk := func(req client.CreateAPIKeyRequest) (client.APIKey, *client.Client) {
		k, err := acmeAdmin.CreateKey(ctx, req)
		if err != nil {
			t.Fatalf("create key %+v: %v", req, err)
		}
		return k, keyClient(t, d, k.Secret)
	}
	userKey, user := mk(client.CreateAPIKeyRequest{Name: "user", Role: client.RoleTenantUser})
	roKey, ro := mk(client.CreateAPIKeyRequest{Name: "ro", Role: client.RoleReadOnly})
	_, research := mk(client.CreateAPIKeyRequest{Name: "research", Role: client.RoleTenantUser, Labels: map[string]string{"team": "research"}})
	_, named := mk(client.CreateAPIKeyRequest{Name: "named", Role: client.RoleTenantUser, Sandboxes: []string{"web"}})
	if _, err := acmeAdmin.CreateKey(ctx, client.CreateAPIKeyRequest{Name: "x", Role: client.RoleAdmin}); !client.IsForbidden(err) {
		t.Fatalf("tenant-admin makes an admin key: %v", err)
	}
	if _, err := user.CreateKey(ctx, client.CreateAPIKeyRequest{Name: "x"}); !client.IsForbidden(err) {
		t.Fatalf("tenant-user makes a key: %v", err)
	}
	if _, err := user.ListTenants(ctx); !client.IsForbidden(err) {
		t.Fatalf("tenant-user lists tenants: %v", err)
	}

	web, err := research.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "web"})
	if err != nil || web.Labels["team"] != "research" || web.Tenant != "acme" {
		t.Fatalf("label-scoped create: %+v %v", web, err)
	}
	db, err := user.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "db", NoStart: true, Labels: map[string]string{"team": "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "nope"}); !client.IsForbidden(err) {
		t.Fatalf("read-only create: %v", err)
	}
	if list, err := ro.ListSandboxes(ctx, false); err != nil || len(list) != 2 {
		t.Fatalf("read-only list: %d %v", len(list), err)
	}
	for name, c := range map[string]*client.Client{"label": research, "name": named} {
		list, err := c.ListSandboxes(ctx, false)
		if err != nil || len(list) != 1 || list[0].ID != web.ID {
			t.Fatalf("%s-scoped list: %+v %v", name, list, err)
		}
		if res, err := c.Exec(ctx, "web", client.ExecRequest{Command: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s-scoped exec in its sandbox: %+v %v", name, res, err)
		}
		_, errOut := c.GetSandbox(ctx, db.ID)
		_, errMissing := c.GetSandbox(ctx, "sb-nothere000000")
		if !client.IsNotFound(errOut) || strings.ReplaceAll(errOut.Error(), db.ID, "X") != strings.ReplaceAll(errMissing.Error(), "sb-nothere000000", "X") {
			t.Fatalf("%s-scoped: out of scope %v, missing %v", name, errOut, errMissing)
		}
	}
	if list, _ := acmeAdmin.ListSandboxes(ctx, true); len(list) != 2 {
		t.Fatalf("acme sees %d sandboxes", len(list))
	}

	// Every route of the OpenAPI document with an id: the default
	// tenant's id answers acme's keys exactly as a missing one.
	raw, err := admin.OpenAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	foreign := map[string]string{"sandboxes": home.ID, "volumes": homeVol.ID, "snapshots": homeSnap.ID,
		"operations": op.ID, "remote-snapshots": homePush.RemoteSnapshot.ID, "volume-snapshots": homePush.RemoteSnapshot.ID}
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	// Ids a request makes afresh (a task's) differ between any two calls.
	madeIDs := regexp.MustCompile(`\btask-[a-z0-9]+`)
	walked := 0
	for path, ops := range doc.Paths {
		if !strings.Contains(path, "{id}") {
			continue
		}
		kind := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")[0]
		fid, ok := foreign[kind]
		if !ok {
			fid = home.ID
		}
		for m := range ops {
			method := strings.ToUpper(m)
			if method == http.MethodGet && strings.HasSuffix(path, "/pty") {
				continue // a websocket
			}
			fill := func(id string) string {
				return param.ReplaceAllStringFunc(path, func(p string) string {
					switch p {
					case "{id}":
						return id
					case "{port}":
						return "8080"
					}
					return strings.Trim(p, "{}") + "-1"
				})
			}
			// The missing id has the foreign one's form (the fork of a
			// snapshot and of a sandbox say different things).
			missing := fid[:len(fid)-4] + "zzzz"
			for _, key := range []string{ak.Secret, userKey.Secret, roKey.Secret} {
				got := rawCall(t, d, key, method, fill(fid))
				want := rawCall(t, d, key, method, fill(missing))
				got.detail = madeIDs.ReplaceAllString(strings.ReplaceAll(got.detail, fid, "<id>"), "<new>")
				want.detail = madeIDs.ReplaceAllString(strings.ReplaceAll(want.detail, missing, "<id>"), "<new>")
				if got != want {
					t.Errorf("%s %s: another tenant's id answers %+v, a missing one %+v", method, path, got, want)
				}
			}
			walked++
		}
	}
	if walked < 60 {
		t.Fatalf("walked only %d routes with an id", walked)
	}
	if _, err := admin.GetSandbox(ctx, home.ID); err != nil {
		t.Fatalf("the walk changed the default tenant's sandbox: %v", err)
	}

	// Suspension refuses acme's keys and stops its sandboxes.
	if _, err := admin.SuspendTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := user.ListSandboxes(ctx, false); !client.IsForbidden(err) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("key of a suspended tenant: %v", err)
	}
	if sb, _ := admin.WithTenant("acme").GetSandbox(ctx, web.ID); sb.State != "stopped" {
		t.Fatalf("sandbox of a suspended tenant is %s", sb.State)
	}
	if _, err := admin.UnsuspendTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := user.StartSandbox(ctx, web.ID); err != nil {
		t.Fatalf("after unsuspend: %v", err)
	}

	// Rotation without overlap ends the old secret at once.
	next, err := acmeAdmin.RotateKey(ctx, userKey.ID, client.RotateAPIKeyRequest{Overlap: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.ListSandboxes(ctx, false); !client.IsUnauthenticated(err) {
		t.Fatalf("rotated-out key: %v", err)
	}
	user = keyClient(t, d, next.Secret)

	// acme pushes; its repository objects are kept aside (as an old
	// bucket version would keep them) but for its data key.
	if res, err := user.Exec(ctx, web.ID, client.ExecRequest{Command: []string{"sh", "-c", "echo acme-secret > /workspace/notes.md"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write acme's notes: %+v %v", res, err)
	}
	var acmePush client.PushResult
	op, err = user.Push(ctx, web.ID, client.PushRequest{Wait: true})
	opResult(t, op, err, &acmePush)
	scopeDir := filepath.Join(repoDir, "scopes", "t-acme")
	saved := map[string][]byte{}
	err = filepath.WalkDir(scopeDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() == "key" {
			return err
		}
		b, err := os.ReadFile(p)
		saved[p] = b
		return err
	})
	if err != nil || len(saved) < 3 {
		t.Fatalf("acme's pushed objects: %d %v", len(saved), err)
	}

	del, err := admin.DeleteTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if del.Sandboxes != 2 || !strings.Contains(strings.Join(del.ErasedScopes, ","), "t-acme") {
		t.Fatalf("deletion: %+v", del)
	}
	if _, err := acmeAdmin.ListSandboxes(ctx, false); !client.IsUnauthenticated(err) {
		t.Fatalf("key of a deleted tenant: %v", err)
	}
	var audit bytes.Buffer
	if err := admin.ExportAudit(ctx, client.AuditQuery{}, &audit); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"action":"repo.erase"`, `"target":"t-acme"`, `"action":"tenant.delete"`} {
		if !strings.Contains(audit.String(), want) {
			t.Fatalf("the audit trail lacks %s", want)
		}
	}

	// The objects come back, the key does not: a new acme cannot restore.
	for p, b := range saved {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	k2, err := admin.WithTenant("acme").CreateKey(ctx, client.CreateAPIKeyRequest{Name: "again", Role: client.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	op, err = keyClient(t, d, k2.Secret).RestoreRemote(ctx, client.RestoreRequest{Snapshot: acmePush.RemoteSnapshot.ID, Wait: true})
	if err == nil && op.State == "succeeded" {
		t.Fatalf("an erased tenant's push restored: %+v", op)
	}
	if _, err := admin.WithTenant("acme").RestoreRemote(ctx, client.RestoreRequest{Snapshot: acmePush.RemoteSnapshot.ID, Wait: true}); err == nil {
		t.Fatal("even the admin key restores an erased tenant's push")
	}

	// The default tenant's push still restores, intact.
	var rr client.RestoreResult
	op, err = admin.RestoreRemote(ctx, client.RestoreRequest{Snapshot: homePush.RemoteSnapshot.ID, Name: "home-again", Wait: true})
	opResult(t, op, err, &rr)
	if out := d.sh(ctx, rr.Sandbox.ID, "agent", "cat /workspace/notes.md"); out != "default-notes\n" {
		t.Fatalf("restored default notes %q", out)
	}
}

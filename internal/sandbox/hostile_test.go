package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// TestHostileInputIsRefusedAndChangesNothing sends each refused request
// over HTTP to the real service on a 2 GiB btrfs pool (1.5 GiB usable,
// over-commit 2: 3 GiB may be promised): each answers 4xx with a message
// naming the problem, and the sandboxes, volumes, snapshots, templates,
// threads and datasets are the same before and after; no refused exec
// runs anything.
func TestHostileInputIsRefusedAndChangesNothing(t *testing.T) {
	e := newBtrfsEnv(t, 2<<30, Options{})
	s := e.s
	ctx := context.Background()
	tn := store.DefaultTenant
	srv := httptest.NewServer(api.NewHandler(s, api.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}))
	t.Cleanup(srv.Close)

	// What is there: a running sandbox, a stopped one, a volume, a thread.
	runner, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "runner", DiskBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "stopped", DiskBytes: 256 << 20, NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "data", SizeBytes: 3 << 29}); err != nil {
		t.Fatal(err)
	}
	// 2 GiB promised of 3 GiB: 1 GiB left.

	big := int64(1) << 62
	GiB := int64(1) << 30
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int    // 0: any 4xx
		want                     string // in the problem's detail
	}{
		// Volume sizes.
		{"volume of 2^62 bytes", "POST", "/v1/volumes", fmt.Sprintf(`{"name":"huge","size_bytes":%d}`, big), nil, 400, "larger than the storage pool: 1.5 GiB usable"},
		{"volume of max int64 bytes", "POST", "/v1/volumes", `{"name":"huge","size_bytes":9223372036854775807}`, nil, 400, "larger than the storage pool"},
		{"volume size beyond int64", "POST", "/v1/volumes", `{"name":"huge","size_bytes":99999999999999999999}`, nil, 0, ""},
		{"volume size 1e30", "POST", "/v1/volumes", `{"name":"huge","size_bytes":1e30}`, nil, 0, ""},
		{"negative volume size", "POST", "/v1/volumes", `{"name":"neg","size_bytes":-1}`, nil, 0, ""},
		{"volume under 1 MiB", "POST", "/v1/volumes", `{"name":"tiny","size_bytes":1000}`, nil, 400, "at least 1 MiB"},
		{"volume over-commits the pool", "POST", "/v1/volumes", fmt.Sprintf(`{"name":"over","size_bytes":%d}`, GiB+1<<20), nil, 409, "would over-commit the storage pool: 2 GiB is promised already (512 MiB to sandboxes, 1.5 GiB to volumes), and at most 2 x 1.5 GiB usable = 3 GiB may be"},
		{"volume the default size (10 GiB) of a 1.5 GiB pool", "POST", "/v1/volumes", `{"name":"deflt"}`, nil, 400, "larger than the storage pool"},
		// Names of the form of an id.
		{"volume named vol-", "POST", "/v1/volumes", `{"name":"vol-abc","size_bytes":67108864}`, nil, 400, "form of an id"},
		{"volume named sb-", "POST", "/v1/volumes", `{"name":"sb-abc","size_bytes":67108864}`, nil, 400, "form of an id"},
		{"volume named SNAP-", "POST", "/v1/volumes", `{"name":"SNAP-1","size_bytes":67108864}`, nil, 400, "form of an id"},
		{"volume name with NUL", "POST", "/v1/volumes", `{"name":"a\u0000b","size_bytes":67108864}`, nil, 400, ""},
		{"sandbox named sb-", "POST", "/v1/sandboxes", `{"name":"sb-abcdefgh","disk_bytes":67108864}`, nil, 400, "form of an id"},
		{"sandbox named vol-", "POST", "/v1/sandboxes", `{"name":"vol-x","disk_bytes":67108864}`, nil, 400, "form of an id"},
		{"sandbox named op-", "POST", "/v1/sandboxes", `{"name":"op-1","disk_bytes":67108864}`, nil, 400, "form of an id"},
		{"sandbox named Key-", "POST", "/v1/sandboxes", `{"name":"Key-1","disk_bytes":67108864}`, nil, 400, "form of an id"},
		{"sandbox named snap-", "POST", "/v1/sandboxes", `{"name":"snap-1","disk_bytes":67108864}`, nil, 400, "form of an id"},
		{"template id sb-", "POST", "/v1/templates", `{"id":"sb-x","source":"/nonexistent"}`, nil, 400, "form of an id"},
		{"template id of another tenant's dataset", "POST", "/v1/templates", `{"id":"t0123456789abcdef-x","source":"/nonexistent"}`, nil, 400, "16 hex digits"},
		{"thread named th-", "POST", "/v1/sandboxes/runner/threads", `{"name":"th-1"}`, nil, 400, "form of an id"},
		// Sandbox disk quotas.
		{"sandbox disk 2^62", "POST", "/v1/sandboxes", fmt.Sprintf(`{"name":"huge","disk_bytes":%d}`, big), nil, 400, "larger than the storage pool"},
		{"negative sandbox disk", "POST", "/v1/sandboxes", `{"name":"neg","disk_bytes":-5}`, nil, 0, ""},
		{"sandbox disk 1 byte", "POST", "/v1/sandboxes", `{"name":"tiny","disk_bytes":1}`, nil, 400, "64 MiB minimum"},
		{"default instance type (10 GiB) in a 1.5 GiB pool", "POST", "/v1/sandboxes", `{"name":"deflt"}`, nil, 400, "disk quota of sandbox deflt (10 GiB) is larger than the storage pool"},
		{"large instance type", "POST", "/v1/sandboxes", `{"name":"large","instance_type":"large"}`, nil, 400, "larger than the storage pool"},
		{"sandbox over-commits the pool", "POST", "/v1/sandboxes", fmt.Sprintf(`{"name":"over","disk_bytes":%d}`, GiB+1<<20), nil, 409, "over-commit"},
		// NUL bytes in what goes to the kernel.
		{"service command with NUL", "POST", "/v1/sandboxes", `{"name":"svc","disk_bytes":67108864,"service":{"command":["sh","-c","touch /x\u0000y"]}}`, nil, 400, "NUL"},
		{"service cwd with NUL", "POST", "/v1/sandboxes", `{"name":"svc","disk_bytes":67108864,"service":{"command":["true"],"cwd":"/\u0000"}}`, nil, 400, "NUL"},
		{"sandbox env with NUL", "POST", "/v1/sandboxes", `{"name":"env","disk_bytes":67108864,"env":{"A":"x\u0000y"}}`, nil, 400, "NUL"},
		{"exec argument with NUL", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran1","x\u0000y"]}`, nil, 400, "NUL"},
		{"exec program with NUL", "POST", "/v1/sandboxes/runner/exec", `{"command":["/bin/touch\u0000","/workspace/ran2"]}`, nil, 400, "NUL"},
		{"exec cwd with NUL", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran3"],"cwd":"/tmp\u0000"}`, nil, 400, "NUL"},
		{"exec env name with NUL", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran4"],"env":{"A\u0000":"1"}}`, nil, 400, "NUL"},
		{"exec env value with NUL", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran5"],"env":{"A":"1\u0000"}}`, nil, 400, "NUL"},
		{"exec streamed with NUL", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran6","\u0000"]}`, map[string]string{"Accept": "text/event-stream"}, 400, "NUL"},
		{"exec as uid 2^32", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran7"],"user":"4294967296"}`, nil, 400, "ids 0 to 65535"},
		{"exec as uid 70000", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran8"],"user":"70000:1"}`, nil, 400, "ids 0 to 65535"},
		{"exec as gid -1", "POST", "/v1/sandboxes/runner/exec", `{"command":["sh","-c","touch /workspace/ran9"],"user":"1:-1"}`, nil, 400, ""},
		{"pty command with NUL", "GET", "/v1/sandboxes/runner/pty?cmd=" + url.QueryEscape("/bin/touch\x00") + "&cmd=/workspace/ran10", "", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, 400, "NUL"},
		{"pty cwd with NUL", "GET", "/v1/sandboxes/runner/pty?cwd=" + url.QueryEscape("/\x00"), "", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, 400, "NUL"},
		{"file read with NUL in the path", "GET", "/v1/sandboxes/runner/files/content?path=" + url.QueryEscape("/etc/hostname\x00x"), "", nil, 0, ""},
		{"file write with NUL in the path", "PUT", "/v1/sandboxes/runner/files/content?path=" + url.QueryEscape("/workspace/ran10\x00x"), "data", map[string]string{"Content-Type": "application/octet-stream"}, 0, ""},
		{"orient with NUL in a file", "GET", "/v1/sandboxes/runner/orient?files=" + url.QueryEscape("/etc/hostname\x00"), "", nil, 0, ""},
		{"template source with NUL", "POST", "/v1/templates", `{"id":"nul","source":"docker-archive:/tmp/x\u0000y"}`, nil, 0, ""},
		// Other numbers.
		{"resize cpus 1e9", "POST", "/v1/sandboxes/stopped/resize", `{"cpus":1e9}`, nil, 400, "cpus"},
		{"resize cpus 0.001", "POST", "/v1/sandboxes/stopped/resize", `{"cpus":0.001}`, nil, 400, "cpus"},
		{"resize pids 2^40", "POST", "/v1/sandboxes/stopped/resize", `{"pids":1099511627776}`, nil, 400, "pids"},
		{"resize memory 1000", "POST", "/v1/sandboxes/stopped/resize", `{"memory_bytes":1000}`, nil, 400, "32 MiB"},
		{"resize disk 2^62", "POST", "/v1/sandboxes/stopped/resize", fmt.Sprintf(`{"disk_bytes":%d}`, big), nil, 400, "larger than the storage pool"},
		{"resize disk 1 byte", "POST", "/v1/sandboxes/stopped/resize", `{"disk_bytes":1}`, nil, 400, "64 MiB"},
		{"resize disk over-commits", "POST", "/v1/sandboxes/stopped/resize", fmt.Sprintf(`{"disk_bytes":%d}`, GiB+512<<20), nil, 409, "over-commit"},
		{"resize to an instance type larger than the pool", "POST", "/v1/sandboxes/stopped/resize", `{"instance_type":"medium"}`, nil, 400, "larger than the storage pool"},
		{"fork past the over-commit bound", "POST", "/v1/sandboxes/stopped/fork", `{"count":5}`, nil, 409, "disk quotas of 5 forks of stopped (+1.2 GiB) would over-commit"},
		{"fork count 10^6", "POST", "/v1/sandboxes/stopped/fork", `{"count":1000000}`, nil, 0, ""},
	}
	ran := func() []string {
		var out []string
		for i := 1; i <= 10; i++ {
			if _, err := os.Lstat(filepath.Join(s.pool.Path(datasetName(runner.ID)), "workspace", fmt.Sprintf("ran%d", i))); err == nil {
				out = append(out, fmt.Sprintf("ran%d", i))
			}
		}
		return out
	}
	before := hostileState(t, s)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req, err := http.NewRequest(c.method, srv.URL+c.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+e.secret)
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode > 499 || (c.status != 0 && resp.StatusCode != c.status) {
				t.Fatalf("%s %s %s: %d %s; want %d (4xx)", c.method, c.path, c.body, resp.StatusCode, b, c.status)
			}
			var p struct{ Detail string }
			json.Unmarshal(b, &p)
			if !strings.Contains(p.Detail, c.want) {
				t.Fatalf("detail %q lacks %q", p.Detail, c.want)
			}
			t.Logf("%d %s", resp.StatusCode, p.Detail)
			if after := hostileState(t, s); after != before {
				t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
			}
			if r := ran(); len(r) > 0 {
				t.Fatalf("a refused exec ran: %v", r)
			}
		})
	}
	// What fits still works (the refusals took nothing): a volume and a
	// sandbox that bring the promises to exactly 3 GiB.
	if _, err := s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "fits", SizeBytes: 768 << 20}); err != nil {
		t.Fatalf("a volume that fits: %v", err)
	}
	if _, err := s.ResizeSandbox(ctx, tn, stopped.ID, client.ResizeRequest{DiskBytes: 512 << 20 /* +256 MiB */}); err != nil {
		t.Fatalf("a resize that fits: %v", err)
	}
	if got := s.Info(ctx).PoolCapacity; got.CommittedBytes != 3*GiB || got.CommitLimitBytes != 3*GiB {
		t.Fatalf("promised %d of %d, want 3 GiB of 3 GiB", got.CommittedBytes, got.CommitLimitBytes)
	}
	if _, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "one-more", DiskBytes: 64 << 20}); err == nil {
		t.Fatal("a create past the bound was admitted")
	}
	// A deleted sandbox promises nothing; undeleting it promises again.
	if _, err := s.DeleteSandbox(ctx, tn, stopped.ID, false); err != nil {
		t.Fatal(err)
	}
	extra, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "extra", DiskBytes: 64 << 20, NoStart: true})
	if err != nil {
		t.Fatalf("create once a sandbox was deleted: %v", err)
	}
	if _, err := s.UndeleteSandbox(ctx, tn, stopped.ID); err == nil || !strings.Contains(err.Error(), "over-commit") {
		t.Fatalf("undelete past the bound: %v", err)
	}
	if _, err := s.DeleteSandbox(ctx, tn, extra.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UndeleteSandbox(ctx, tn, stopped.ID); err != nil {
		t.Fatalf("undelete once there is room: %v", err)
	}
}

// hostileState is everything a refused request must leave as it was.
func hostileState(t *testing.T, s *Service) string {
	t.Helper()
	ctx := context.Background()
	var parts []string
	sbs, _ := s.st.ListSandboxes(ctx, store.SandboxFilter{IncludeDeleted: true})
	for _, sb := range sbs {
		parts = append(parts, "sandbox "+sb.ID+" "+sb.Name+" "+string(sb.State)+" "+string(sb.Spec))
	}
	vols, _ := s.st.ListVolumes(ctx, "", true)
	for _, v := range vols {
		parts = append(parts, fmt.Sprintf("volume %s %s %d %s", v.ID, v.Name, v.SizeBytes, v.State))
	}
	snaps, _ := s.st.ListSnapshots(ctx, store.DefaultTenant, "")
	for _, sn := range snaps {
		parts = append(parts, "snapshot "+sn.ID)
	}
	tmpls, _ := s.st.ListTemplates(ctx, store.DefaultTenant)
	for _, tm := range tmpls {
		parts = append(parts, "template "+tm.ID)
	}
	for _, sb := range sbs {
		ths, _ := s.st.ListThreads(ctx, sb.TenantID, sb.ID)
		for _, th := range ths {
			parts = append(parts, "thread "+th.ID+" "+th.Name)
		}
	}
	for _, kind := range []string{pool.KindTemplate, pool.KindSandbox, pool.KindSnapshot, pool.KindVolume} {
		ids, _ := s.pool.List(ctx, kind)
		for _, id := range ids {
			parts = append(parts, "dataset "+kind+"/"+id)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

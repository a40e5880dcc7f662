package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/e2b"
	"github.com/stead-dev/stead/internal/network/nettest"
)

// The official e2b npm packages the compatibility tests install: one that
// calls the v2 routes (POST /v2/sandboxes, /v2/sandboxes/{id}/connect)
// and the last one before them (POST /sandboxes, /sandboxes/{id}/connect).
const (
	e2bSDKVersion   = "2.51.0"
	e2bSDKVersionV1 = "2.50.0"
)

// installE2BSDK installs the official e2b package at version into a
// temporary directory (never into the repository), copies the scripts of
// e2e/testdata into it, and returns it. A missing npm fails the test: CI
// must not skip the compatibility suite silently.
func installE2BSDK(t *testing.T, ctx context.Context, version string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm not found on PATH (%v): the E2B compatibility test needs Node >= 20 and npm", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"e2b-compat","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "e2b@"+version)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install e2b@%s: %v\n%s", version, err, out)
	}
	scripts, err := filepath.Glob("testdata/e2b_*.mjs")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("the E2B scripts in e2e/testdata: %v", err)
	}
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runE2BScript runs script (one of e2e/testdata/e2b_*.mjs, copied into
// dir by installE2BSDK) with Node, configured only by E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY (a stead key in its e2b_ form) plus
// extra, and returns its standard output; a failure fails the test with
// the script's output and the daemon's log.
func runE2BScript(t *testing.T, ctx context.Context, d *daemon, dir, script string, extra ...string) []byte {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: %v", err)
	}
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(append(env, "E2B_API_URL=http://"+d.addr, "E2B_SANDBOX_URL=http://"+d.addr, "E2B_API_KEY="+e2b.EncodeKey(d.key)), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the E2B SDK script %s failed (%v):\n%s\n%s\n--- daemon log ---\n%s", script, err, stderr.String(), stdout.String(), tail(d.logText(), 6000))
	}
	return stdout.Bytes()
}

// TestE2BSDKCompat: the official E2B SDK drives a real daemon through
// create, commands, files, pause/connect, setTimeout, list and kill
// (e2e/testdata/e2b_compat.mjs); the sandbox it made is then a stead
// sandbox, seen through stead's own API, and after a kill -9 and a
// restart of the daemon the SDK connects to it again and finds its files
// (e2e/testdata/e2b_reconnect.mjs).
func TestE2BSDKCompat(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := installE2BSDK(t, ctx, e2bSDKVersion)
	out := runE2BScript(t, ctx, d, dir, "e2b_compat.mjs")
	var res struct{ ID, Killed, Token string }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	if !strings.Contains(d.logText(), "method=POST path=/v2/sandboxes ") {
		t.Fatalf("SDK %s did not create through POST /v2/sandboxes:\n%s", e2bSDKVersion, tail(d.logText(), 4000))
	}

	// The E2B sandbox is a stead sandbox: metadata are its labels, the
	// E2B timeout its idle timeout (set to 2 min by setTimeout), never a
	// delete; the killed one is soft-deleted, recoverable.
	sb, err := d.c.GetSandbox(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" || sb.Labels["suite"] != "e2b" || sb.Labels["run"] != "one" || sb.IdleTimeout != "2m0s" || sb.OnIdle != "stop" {
		t.Fatalf("the E2B sandbox through stead's API: %+v", sb)
	}
	if _, ok := sb.Env["GREETING"]; !ok {
		t.Fatalf("the envs given at create are not the sandbox's env: %+v", sb.Env)
	}
	if out := d.sh(ctx, res.ID, "agent", "cat /home/agent/keep.txt"); out != "kept across pause" {
		t.Fatalf("a file the SDK wrote, through stead's exec: %q", out)
	}
	// ... and through stead's CLI: listed by its label, and its files read
	// with `stead exec`.
	if code, out, errOut := d.cli("ls"); code != 0 || !strings.Contains(out, res.ID) {
		t.Fatalf("stead ls: exit %d, %q %q (want the E2B sandbox %s listed)", code, out, errOut, res.ID)
	}
	if code, out, errOut := d.cli("exec", res.ID, "--", "cat", "/home/user/keep.txt"); code != 0 || out != "kept across pause" {
		t.Fatalf("stead exec cat /home/user/keep.txt: exit %d, %q %q", code, out, errOut)
	}
	killed, err := d.c.GetSandbox(ctx, res.Killed)
	if err != nil || killed.State != "deleted" || killed.PurgeAt == nil {
		t.Fatalf("the killed sandbox: %+v %v (want soft-deleted, recoverable)", killed, err)
	}

	e2bBadInputChangesNothing(t, ctx, d, res.ID, res.Token)

	// Background commands, stdin, connect, kill and terminals
	// (e2e/testdata/e2b_features.mjs).
	out = runE2BScript(t, ctx, d, dir, "e2b_features.mjs")
	var feat struct {
		ID           string
		Forks        []string
		FromSnapshot string
	}
	if err := json.Unmarshal(out, &feat); err != nil || len(feat.Forks) != 2 {
		t.Fatalf("features script output %q: %v", out, err)
	}
	// The forks and the sandbox made from a snapshot are stead sandboxes,
	// with the E2B timeout (2 min for the forks) as their idle timeout.
	for _, f := range append(feat.Forks, feat.FromSnapshot) {
		sb, err := d.c.GetSandbox(ctx, f)
		if err != nil || sb.State != "running" || sb.OnIdle != "stop" {
			t.Fatalf("fork %s through stead's API: %+v %v", f, sb, err)
		}
		if f != feat.FromSnapshot && sb.IdleTimeout != "2m0s" {
			t.Fatalf("fork %s: idle timeout %q, want the E2B timeout 2m0s", f, sb.IdleTimeout)
		}
	}
	e2bPolledWatchers(t, ctx, d, res.ID, res.Token)

	// A kill -9 of the daemon and a restart: the SDK connects to the same
	// sandbox (its envd token still valid) and its files are all there.
	d.kill9()
	d.start()
	runE2BScript(t, ctx, d, dir, "e2b_reconnect.mjs", "E2B_SANDBOX_ID="+res.ID)
}

// TestE2BSDKCompatV1Routes: the last SDK before the v2 routes (it creates
// with POST /sandboxes and connects with POST /sandboxes/{id}/connect)
// runs the same core flow (e2e/testdata/e2b_compat.mjs).
func TestE2BSDKCompatV1Routes(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := installE2BSDK(t, ctx, e2bSDKVersionV1)
	out := runE2BScript(t, ctx, d, dir, "e2b_compat.mjs")
	var res struct{ ID string }
	if err := json.Unmarshal(out, &res); err != nil || res.ID == "" {
		t.Fatalf("script output %q: %v", out, err)
	}
	log := d.logText()
	for _, want := range []string{"method=POST path=/sandboxes ", "method=POST path=/sandboxes/" + res.ID + "/connect "} {
		if !strings.Contains(log, want) {
			t.Errorf("SDK %s never called %q", e2bSDKVersionV1, want)
		}
	}
	if strings.Contains(log, "method=POST path=/v2/sandboxes") {
		t.Errorf("SDK %s called a v2 create or connect route", e2bSDKVersionV1)
	}
	if sb, err := d.c.GetSandbox(ctx, res.ID); err != nil || sb.Labels["suite"] != "e2b" || sb.State != "running" {
		t.Fatalf("the sandbox SDK %s made, through stead's API: %+v %v", e2bSDKVersionV1, sb, err)
	}
}

// TestE2BNetworkRules: E2B's network rules (allowInternetAccess, network
// allowOut/denyOut at create, updateNetwork) through the official SDK are
// stead's egress policy, tested against the stand-in internet
// (e2e/testdata/e2b_network.mjs); a sandbox's policy is then seen
// through stead's API.
func TestE2BNetworkRules(t *testing.T) {
	inet := nettest.NewInternet(t)
	d, _ := netDaemon(t, inet)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := installE2BSDK(t, ctx, e2bSDKVersion)
	out := runE2BScript(t, ctx, d, dir, "e2b_network.mjs", "WEB="+inet.Web.String(), "WEB2="+inet.Web2.String())
	var res struct{ Open, Closed, AllowOne string }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	n, err := d.c.GetNetwork(ctx, res.AllowOne)
	if err != nil || n.Policy.InternetOn() != true || len(n.Policy.Allow) != 1 || n.Policy.Allow[0] != inet.Web.String() {
		t.Fatalf("the policy of the allow-one sandbox through stead's API: %+v %v", n.Policy, err)
	}
	if n, err := d.c.GetNetwork(ctx, res.Closed); err != nil || n.Policy.InternetOn() {
		t.Fatalf("the policy of the closed sandbox through stead's API: %+v %v", n.Policy, err)
	}
	// The policy outlives a stop and start, as every stead policy does.
	if _, err := d.c.StopSandbox(ctx, res.AllowOne); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.StartSandbox(ctx, res.AllowOne); err != nil {
		t.Fatal(err)
	}
	d.mustNotFetch(ctx, res.AllowOne, "http://"+inet.Web2.String()+"/")
	d.mustFetch(ctx, res.AllowOne, "http://"+inet.Web.String()+"/", "host=")
}

// e2bBadInputChangesNothing: bad input to the E2B routes gets E2B's
// error shape with the right status and changes nothing; another
// tenant's key sees id as absent, and a sandbox's envd token opens no
// other sandbox.
func e2bBadInputChangesNothing(t *testing.T, ctx context.Context, d *daemon, id, token string) {
	t.Helper()
	before, err := d.c.ListSandboxes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	key := e2b.EncodeKey(d.key)
	call := func(method, path, body string, hdr map[string]string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+d.addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if resp.StatusCode >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s %s: %d without a JSON body: %q", method, path, resp.StatusCode, b)
		}
		if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%s %s: %d with a body that is not JSON: %q", method, path, resp.StatusCode, b)
			}
		}
		return resp.StatusCode, m
	}
	withKey := map[string]string{"X-API-KEY": key}
	for _, c := range []struct {
		method, path, body string
		hdr                map[string]string
		status             int
	}{
		{"POST", "/v2/sandboxes", `{"timeout":-5}`, withKey, 400},
		{"POST", "/v2/sandboxes", `{"timeout":`, withKey, 400},
		{"POST", "/v2/sandboxes", `{"metadata":{"bad key!":"x"}}`, withKey, 400},
		{"POST", "/v2/sandboxes", `{"network":{"egressProxy":{"address":"proxy.test:1080"}}}`, withKey, 400},
		{"POST", "/v2/sandboxes", `{"network":{"denyOut":["198.18.0.0/15"],"allowOut":["198.18.0.1"]}}`, withKey, 400},
		{"POST", "/v2/sandboxes", `{"network":{"denyOut":["0.0.0.0/0"],"allowOut":["not an address!"]}}`, withKey, 400},
		{"PUT", "/sandboxes/" + id + "/network", `{"denyOut":["10.0.0.0/8"],"allowOut":["10.0.0.1"]}`, withKey, 400},
		{"PUT", "/sandboxes/" + id + "/network", `{"denyOut":"all"}`, withKey, 400},
		{"POST", "/v2/sandboxes", `{"templateID":"no-such-template"}`, withKey, 404},
		{"POST", "/v2/sandboxes", `{}`, map[string]string{"X-API-KEY": "e2b_00"}, 401},
		{"POST", "/v2/sandboxes", `{}`, nil, 401},
		{"PUT", "/v2/sandboxes", `{}`, withKey, 405},
		{"GET", "/sandboxes/" + id + "/no-such-route", ``, withKey, 404},
		{"GET", "/sandboxes/sb-absent", ``, withKey, 404},
		{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":0}`, withKey, 400},
		{"POST", "/sandboxes/" + id + "/timeout", `{}`, withKey, 400},
		{"GET", "/v2/sandboxes?state=dead", ``, withKey, 400},
		{"GET", "/v2/sandboxes?nextToken=garbage", ``, withKey, 400},
		{"GET", "/v2/sandboxes?limit=0", ``, withKey, 400},
		{"POST", "/sandboxes/" + id + "/resume", `{}`, withKey, 409},
		{"GET", "/sandboxes/" + id + "/metrics?start=yesterday", ``, withKey, 400},
		{"GET", "/sandboxes/" + id + "/metrics?start=20&end=10", ``, withKey, 400},
		{"GET", "/sandboxes/sb-absent/metrics", ``, withKey, 404},
		{"POST", "/sandboxes/" + id + "/fork", `{"count":0}`, withKey, 400},
		{"POST", "/sandboxes/" + id + "/fork", `{"count":51}`, withKey, 400},
		{"POST", "/sandboxes/" + id + "/fork", `{"timeout":-1}`, withKey, 400},
		{"POST", "/sandboxes/sb-absent/fork", `{}`, withKey, 404},
		{"POST", "/sandboxes/sb-absent/snapshots", `{}`, withKey, 404},
		{"POST", "/v2/sandboxes", `{"templateID":"snap-absent"}`, withKey, 404},
		{"GET", "/snapshots?sandboxID=sb-absent", ``, withKey, 404},
		{"GET", "/snapshots?limit=0", ``, withKey, 400},
		{"DELETE", "/templates/base", ``, withKey, 404},
	} {
		status, body := call(c.method, c.path, c.body, c.hdr)
		code, _ := body["code"].(float64)
		msg, _ := body["message"].(string)
		if status != c.status || int(code) != c.status || msg == "" {
			t.Errorf("%s %s %s: %d %v, want %d in E2B's shape {code, message}", c.method, c.path, c.body, status, body, c.status)
		}
	}
	after, err := d.c.ListSandboxes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("bad input changed the sandboxes: %d before, %d after", len(before), len(after))
	}
	if sb, err := d.c.GetSandbox(ctx, id); err != nil || sb.IdleTimeout != "2m0s" {
		t.Fatalf("a refused timeout changed the sandbox: %+v %v", sb, err)
	}

	// Another tenant: the sandbox is absent, exactly as one that never
	// existed; its envd token does not open another sandbox.
	if _, err := d.c.CreateTenant(ctx, client.CreateTenantRequest{ID: "other", Name: "Other"}); err != nil {
		t.Fatal(err)
	}
	ok, err := d.c.WithTenant("other").CreateKey(ctx, client.CreateAPIKeyRequest{Name: "e2b", Role: client.RoleTenantUser})
	if err != nil {
		t.Fatal(err)
	}
	otherKey := map[string]string{"X-API-KEY": e2b.EncodeKey(ok.Secret)}
	s1, b1 := call("GET", "/sandboxes/"+id, "", otherKey)
	s2, b2 := call("GET", "/sandboxes/sb-absent", "", otherKey)
	if s1 != 404 || s2 != 404 || strings.ReplaceAll(b1["message"].(string), id, "X") != strings.ReplaceAll(b2["message"].(string), "sb-absent", "X") {
		t.Fatalf("another tenant's sandbox: %d %v; an absent one: %d %v", s1, b1, s2, b2)
	}
	if s, _ := call("DELETE", "/sandboxes/"+id, "", otherKey); s != 404 {
		t.Fatalf("another tenant killed the sandbox: %d", s)
	}
	if s, _ := call("POST", "/sandboxes/"+id+"/pause", "", otherKey); s != 404 {
		t.Fatalf("another tenant paused the sandbox: %d", s)
	}
	other, err := d.c.WithTenant("other").CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	envdHdr := func(sandbox, tok string) map[string]string {
		return map[string]string{"E2b-Sandbox-Id": sandbox, "E2b-Sandbox-Port": e2b.EnvdPort, "X-Access-Token": tok}
	}
	if s, _ := call("GET", "/files?path=/etc/hostname", "", envdHdr(other.ID, token)); s != 401 {
		t.Fatalf("sandbox %s's envd token read a file of another tenant's sandbox: %d", id, s)
	}
	if s, _ := call("GET", "/files?path=/etc/hostname", "", envdHdr(id, "x"+token)); s != 401 {
		t.Fatalf("a wrong envd token was accepted: %d", s)
	}
	if s, _ := call("GET", "/files?path=/etc/hostname", "", envdHdr(id, token)); s != 200 {
		t.Fatalf("the sandbox's own envd token: %d", s)
	}
	if sb, err := d.c.GetSandbox(ctx, id); err != nil || sb.State != "running" {
		t.Fatalf("another tenant's calls changed the sandbox: %+v %v", sb, err)
	}
}

// e2bPolledWatchers: the watcher calls without a stream (CreateWatcher,
// GetWatcherEvents, RemoveWatcher; the Python SDK's synchronous watch
// uses them) report changes, resolve a symlink inside the sandbox (a link
// to /etc watches the sandbox's /etc), and are absent for another
// sandbox's token.
func e2bPolledWatchers(t *testing.T, ctx context.Context, d *daemon, id, token string) {
	t.Helper()
	rpcTo := func(sandbox, method, tok, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.addr+"/filesystem.Filesystem/"+method, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("E2b-Sandbox-Id", sandbox)
		req.Header.Set("X-Access-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("%s: %d, not JSON: %v", method, resp.StatusCode, err)
		}
		return resp.StatusCode, m
	}
	rpc := func(method, tok, body string) (int, map[string]any) {
		t.Helper()
		return rpcTo(id, method, tok, body)
	}
	d.sh(ctx, id, "root", "mkdir -p /home/agent/pw && chown agent /home/agent/pw && ln -sfn /etc /home/agent/etclink")
	status, m := rpc("CreateWatcher", token, `{"path":"/home/user/pw","recursive":true}`)
	wid, _ := m["watcherId"].(string)
	if status != 200 || wid == "" {
		t.Fatalf("CreateWatcher: %d %v", status, m)
	}
	status, m = rpc("CreateWatcher", token, `{"path":"etclink"}`)
	lid, _ := m["watcherId"].(string)
	if status != 200 || lid == "" {
		t.Fatalf("CreateWatcher on a symlink to /etc: %d %v", status, m)
	}
	d.sh(ctx, id, "root", "touch /home/agent/pw/polled.txt /etc/e2b-watch-probe")
	events := func(w string) string {
		t.Helper()
		var all []string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			status, m := rpc("GetWatcherEvents", token, `{"watcherId":"`+w+`"}`)
			if status != 200 {
				t.Fatalf("GetWatcherEvents: %d %v", status, m)
			}
			evs, _ := m["events"].([]any)
			for _, e := range evs {
				ev := e.(map[string]any)
				all = append(all, ev["type"].(string)+" "+ev["name"].(string))
			}
			if len(all) > 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return strings.Join(all, ",")
	}
	if got := events(wid); !strings.Contains(got, "EVENT_TYPE_CREATE polled.txt") {
		t.Fatalf("polled watcher events: %q", got)
	}
	if got := events(lid); !strings.Contains(got, "EVENT_TYPE_CREATE e2b-watch-probe") {
		t.Fatalf("a watch of a symlink to /etc did not watch the sandbox's /etc: %q", got)
	}
	if _, err := os.Stat("/etc/e2b-watch-probe"); err == nil {
		t.Fatal("the sandbox's write reached the host's /etc")
	}
	other, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.addr+"/sandboxes/"+other.ID, nil)
	req.Header.Set("X-API-KEY", e2b.EncodeKey(d.key))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var detail struct{ EnvdAccessToken string }
	json.NewDecoder(resp.Body).Decode(&detail)
	resp.Body.Close()
	if status, m := rpcTo(other.ID, "GetWatcherEvents", detail.EnvdAccessToken, `{"watcherId":"`+wid+`"}`); status != 404 {
		t.Fatalf("another sandbox read this sandbox's watcher: %d %v", status, m)
	}
	// A kill through the E2B API closes the sandbox's watchers.
	status, m = rpcTo(other.ID, "CreateWatcher", detail.EnvdAccessToken, `{"path":"/home/agent"}`)
	oid, _ := m["watcherId"].(string)
	if status != 200 || oid == "" {
		t.Fatalf("CreateWatcher in the other sandbox: %d %v", status, m)
	}
	kreq, _ := http.NewRequestWithContext(ctx, "DELETE", "http://"+d.addr+"/sandboxes/"+other.ID, nil)
	kreq.Header.Set("X-API-KEY", e2b.EncodeKey(d.key))
	if resp, err := http.DefaultClient.Do(kreq); err != nil || resp.StatusCode != 204 {
		t.Fatalf("kill the other sandbox: %v %v", resp, err)
	}
	if status, m := rpcTo(other.ID, "GetWatcherEvents", detail.EnvdAccessToken, `{"watcherId":"`+oid+`"}`); status != 404 {
		t.Fatalf("a killed sandbox's watcher: %d %v", status, m)
	}
	if status, _ := rpc("GetWatcherEvents", "x"+token, `{"watcherId":"`+wid+`"}`); status != 401 {
		t.Fatalf("a wrong token read a watcher: %d", status)
	}
	for _, w := range []string{wid, lid} {
		if status, m := rpc("RemoveWatcher", token, `{"watcherId":"`+w+`"}`); status != 200 {
			t.Fatalf("RemoveWatcher: %d %v", status, m)
		}
	}
	if status, m := rpc("GetWatcherEvents", token, `{"watcherId":"`+wid+`"}`); status != 404 || m["code"] != "not_found" {
		t.Fatalf("a removed watcher: %d %v", status, m)
	}
	if status, m := rpc("CreateWatcher", token, `{"path":"/home/user/no-such-dir"}`); status != 404 {
		t.Fatalf("watch a missing directory: %d %v", status, m)
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

const (
	testSecret    = "sk-live-7f3c9a1e5b"
	testSvcSecret = "svc-tok-24d8e6"
)

func secretSpec() spec {
	return spec{InstanceType: "small", Env: map[string]string{"OPENAI_API_KEY": testSecret, "EMPTY": ""},
		Service: &client.Service{Command: []string{"sleep", "1d"}, Env: map[string]string{"TOKEN": testSvcSecret}}}
}

// TestSealedEnvironmentOpensOnlyForItsOwnSandbox: sealed values are absent
// from the stored spec (names stay), open again for the sandbox they were
// sealed for under the same key file, and do not open for another sandbox
// id (a row copied onto another sandbox), after tampering, or under
// another key.
func TestSealedEnvironmentOpensOnlyForItsOwnSandbox(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "secrets.key")
	s := &Service{secrets: tenancy.NewSecretKey(keyFile, nil)}

	none := spec{InstanceType: "small"}
	if err := s.sealEnv("sb-a", &none); err != nil || none.Secrets != "" {
		t.Fatalf("seal without environment: %+v %v", none, err)
	}
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Fatalf("key file made with nothing to seal: %v", err)
	}

	sp := secretSpec()
	req := sp.Service
	if err := s.sealEnv("sb-a", &sp); err != nil {
		t.Fatal(err)
	}
	if req.Env["TOKEN"] != testSvcSecret {
		t.Fatal("sealing changed the caller's service in place")
	}
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode() != 0o600 || fi.Size() != 32 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	stored, _ := json.Marshal(sp)
	for _, v := range []string{testSecret, testSvcSecret} {
		if strings.Contains(string(stored), v) {
			t.Fatalf("stored spec holds the value %q: %s", v, stored)
		}
	}
	if sp.Env["OPENAI_API_KEY"] != "" || sp.Service.Env["TOKEN"] != "" || len(sp.Env) != 2 {
		t.Fatalf("stored names: %+v %+v", sp.Env, sp.Service.Env)
	}
	if err := s.sealEnv("sb-a", &sp); err == nil {
		t.Fatal("sealed twice")
	}

	load := func() spec {
		var v spec
		if err := json.Unmarshal(stored, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	other := load()
	if err := s.openEnv("sb-b", &other); err == nil {
		t.Fatalf("another sandbox's row opened: %+v", other.Env)
	}
	tampered := load()
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(tampered.Secrets, sealedEnvPrefix))
	raw[len(raw)-1] ^= 1
	tampered.Secrets = sealedEnvPrefix + base64.StdEncoding.EncodeToString(raw)
	if err := s.openEnv("sb-a", &tampered); err == nil {
		t.Fatal("a tampered value opened")
	}
	otherKey := load()
	if err := (&Service{secrets: tenancy.NewSecretKey(filepath.Join(dir, "other.key"), nil)}).openEnv("sb-a", &otherKey); err == nil {
		t.Fatal("opened without the key file (or under another key)")
	}

	// A new service on the same key file (a daemon restart) opens it.
	got := load()
	if err := (&Service{secrets: tenancy.NewSecretKey(keyFile, nil)}).openEnv("sb-a", &got); err != nil {
		t.Fatal(err)
	}
	if got.Secrets != "" || got.Env["OPENAI_API_KEY"] != testSecret || got.Env["EMPTY"] != "" || len(got.Env) != 2 ||
		got.Service.Env["TOKEN"] != testSvcSecret || got.Service.Command[0] != "sleep" {
		t.Fatalf("opened: %+v %+v", got.Env, got.Service)
	}

	// A spec stored before sealing reads as it is.
	legacy := secretSpec()
	if err := s.openEnv("sb-a", &legacy); err != nil || legacy.Env["OPENAI_API_KEY"] != testSecret {
		t.Fatalf("plaintext spec: %+v %v", legacy.Env, err)
	}

	// A corrupt key file is an error, never replaced.
	os.WriteFile(keyFile, []byte("short"), 0o600)
	bad := load()
	if err := (&Service{secrets: tenancy.NewSecretKey(keyFile, nil)}).openEnv("sb-a", &bad); err == nil {
		t.Fatal("opened with a corrupt key file")
	}
	if b, _ := os.ReadFile(keyFile); string(b) != "short" {
		t.Fatal("corrupt key file replaced")
	}
}

// TestViewsShowEnvironmentNamesNotValues: the API's sandbox view and the
// spec label of a pushed snapshot show names with masked values, for
// sealed and for plaintext (older) specs.
func TestViewsShowEnvironmentNamesNotValues(t *testing.T) {
	s := &Service{secrets: tenancy.NewSecretKey("", nil)}
	sealed := secretSpec()
	if err := s.sealEnv("sb-a", &sealed); err != nil {
		t.Fatal(err)
	}
	for name, sp := range map[string]spec{"sealed": sealed, "plaintext": secretSpec()} {
		b, _ := json.Marshal(sp)
		v := s.view(store.Sandbox{ID: "sb-a", Spec: b})
		out, _ := json.Marshal(v)
		if strings.Contains(string(out), testSecret) || strings.Contains(string(out), testSvcSecret) {
			t.Fatalf("%s: view shows a value: %s", name, out)
		}
		if v.Env["OPENAI_API_KEY"] != client.SecretMask || v.Service.Env["TOKEN"] != client.SecretMask || len(v.Env) != 2 {
			t.Fatalf("%s: view env %+v service env %+v", name, v.Env, v.Service.Env)
		}
		m := &repo.Manifest{Source: "sandbox/sb-a", Labels: map[string]string{"spec": string(b), "template": "host"}}
		rv := remoteView(m)
		out, _ = json.Marshal(rv)
		if strings.Contains(string(out), testSecret) || strings.Contains(string(out), testSvcSecret) || strings.Contains(string(out), "secrets") {
			t.Fatalf("%s: remote snapshot view shows a value: %s", name, out)
		}
		if !strings.Contains(rv.Labels["spec"], "OPENAI_API_KEY") || rv.Labels["template"] != "host" || m.Labels["spec"] != string(b) {
			t.Fatalf("%s: labels %+v", name, rv.Labels)
		}
	}
	// The stored spec is not changed by a view.
	if sealed.Env["OPENAI_API_KEY"] != "" || sealed.Service.Env["TOKEN"] != "" {
		t.Fatal("view changed the spec")
	}
}

// TestEnvironmentReachesSandboxesSealedAtRest: with the real service, the
// environment given at create reaches the sandbox's processes and its
// service while the stored row holds no value; a fork (another sandbox
// id) gets it; a row stored in plaintext by an older stead still starts,
// and Reconcile seals it.
func TestEnvironmentReachesSandboxesSealedAtRest(t *testing.T) {
	s := newService(t)
	s.secrets = tenancy.NewSecretKey(filepath.Join(t.TempDir(), "secrets.key"), nil)
	s.wireTenancy() // tenant secrets share the key
	ctx := context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "sec",
		Env:     map[string]string{"OPENAI_API_KEY": testSecret},
		Service: &client.Service{Command: []string{"sh", "-c", `echo "svc:$TOKEN:$OPENAI_API_KEY" > /tmp/svc; exec sleep 1d`}, Env: map[string]string{"TOKEN": testSvcSecret}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Env["OPENAI_API_KEY"] != client.SecretMask || sb.Service.Env["TOKEN"] != client.SecretMask {
		t.Fatalf("create answered %+v %+v", sb.Env, sb.Service)
	}
	noValue := func(id string) {
		t.Helper()
		row, err := s.st.GetSandbox(ctx, store.DefaultTenant, id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(row.Spec), testSecret) || strings.Contains(string(row.Spec), testSvcSecret) || !strings.Contains(string(row.Spec), `"secrets":"v1:`) {
			t.Fatalf("stored spec of %s: %s", id, row.Spec)
		}
	}
	env := func(id string) string {
		t.Helper()
		res, err := s.Exec(ctx, store.DefaultTenant, id, client.ExecRequest{Command: []string{"sh", "-c", `for i in $(seq 50); do [ -s /tmp/svc ] && break; sleep 0.1; done; echo "$OPENAI_API_KEY"; cat /tmp/svc`}}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec in %s: %+v %v", id, res, err)
		}
		return string(res.Stdout)
	}
	want := testSecret + "\nsvc:" + testSvcSecret + ":" + testSecret + "\n"
	noValue(sb.ID)
	if got := env(sb.ID); got != want {
		t.Fatalf("environment in the sandbox: %q, want %q", got, want)
	}
	snap, err := s.CreateSnapshot(ctx, store.DefaultTenant, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := s.st.GetSnapshot(ctx, store.DefaultTenant, snap.ID)
	if err != nil || strings.Contains(string(sn.Spec), testSecret) {
		t.Fatalf("snapshot record: %s %v", sn.Spec, err)
	}
	forks, err := s.Fork(ctx, store.DefaultTenant, snap.ID, client.ForkRequest{})
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	noValue(forks[0].ID)
	if got := env(forks[0].ID); got != want {
		t.Fatalf("environment in the fork: %q, want %q", got, want)
	}

	// An older stead's row: plaintext values, no Secrets.
	if _, err := s.StopSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	row, _ := s.st.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	legacy := secretSpec()
	legacy.Service.Command = []string{"sh", "-c", `echo "svc:$TOKEN:$OPENAI_API_KEY" > /tmp/svc; exec sleep 1d`}
	legacy.Limits = client.Limits{CPUs: 1, MemoryBytes: 512 << 20, Pids: 256}
	row.Spec, _ = json.Marshal(legacy)
	if _, err := s.st.UpdateSandbox(ctx, row); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := env(sb.ID); got != want {
		t.Fatalf("environment from a plaintext row: %q, want %q", got, want)
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	noValue(sb.ID)
	if _, err := s.StopSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := env(sb.ID); got != want {
		t.Fatalf("environment after Reconcile sealed the row: %q, want %q", got, want)
	}
}

// TestPushedEnvironmentComesBackOnAReplacementDaemon: a push carries the
// environment inside its sealed manifest (never in the repository's bytes
// in plaintext, never in the remote snapshot view), so a restore, on this
// daemon or on a replacement with another secrets key, gets it back and
// seals it again; a pull keeps it sealed in the local snapshot record.
func TestPushedEnvironmentComesBackOnAReplacementDaemon(t *testing.T) {
	s := newService(t)
	s.secrets = tenancy.NewSecretKey(filepath.Join(t.TempDir(), "secrets.key"), nil)
	s.wireTenancy() // tenant secrets share the key
	repoDir := t.TempDir()
	withRepo(t, s, repoDir)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "pushed", Env: map[string]string{"OPENAI_API_KEY": testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	var pr client.PushResult
	op, err := s.PushSandbox(ctx, tn, sb.ID, client.PushRequest{Wait: true})
	opDone(t, op, err, &pr)
	filepath.WalkDir(repoDir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), testSecret) {
				t.Errorf("repository file %s holds the value", p)
			}
		}
		return nil
	})
	remote, err := s.ListRemoteSnapshots(ctx, tn, sb.ID)
	if err != nil || len(remote) != 1 {
		t.Fatalf("remote: %+v %v", remote, err)
	}
	if out, _ := json.Marshal(remote); strings.Contains(string(out), testSecret) || !strings.Contains(string(out), "OPENAI_API_KEY") {
		t.Fatalf("remote snapshot view: %s", out)
	}

	printenv := func(s *Service, id string) string {
		t.Helper()
		res, err := s.Exec(ctx, tn, id, client.ExecRequest{Command: []string{"printenv", "OPENAI_API_KEY"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	sealedRow := func(s *Service, id string) {
		t.Helper()
		row, err := s.st.GetSandbox(ctx, tn, id)
		if err != nil || strings.Contains(string(row.Spec), testSecret) || !strings.Contains(string(row.Spec), `"secrets":"v1:`) {
			t.Fatalf("stored spec of %s: %s %v", id, row.Spec, err)
		}
	}
	var rr client.RestoreResult
	op, err = s.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Name: "here", Wait: true})
	opDone(t, op, err, &rr)
	sealedRow(s, rr.Sandbox.ID)
	if got := printenv(s, rr.Sandbox.ID); got != testSecret {
		t.Fatalf("restored here: %q", got)
	}
	op, err = s.PullRemote(ctx, tn, client.PullRequest{Snapshot: pr.RemoteSnapshot.ID, Wait: true})
	opDone(t, op, err, &rr)
	sn, err := s.st.GetSnapshot(ctx, tn, rr.Snapshot.ID)
	if err != nil || strings.Contains(string(sn.Spec), testSecret) || !strings.Contains(string(sn.Spec), `"secrets":"v1:`) {
		t.Fatalf("pulled snapshot record: %s %v", sn.Spec, err)
	}
	forks, err := s.Fork(ctx, tn, sn.ID, client.ForkRequest{})
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork of the pulled snapshot: %v %v", forks, err)
	}
	if got := printenv(s, forks[0].ID); got != testSecret {
		t.Fatalf("fork of the pulled snapshot: %q", got)
	}

	// A replacement daemon: its own store, pool and secrets key.
	s2 := newService(t)
	s2.secrets = tenancy.NewSecretKey(filepath.Join(t.TempDir(), "secrets.key"), nil)
	s2.wireTenancy() // tenant secrets share the key
	withRepo(t, s2, repoDir)
	op, err = s2.RestoreRemote(ctx, tn, client.RestoreRequest{Snapshot: pr.RemoteSnapshot.ID, Name: "there", Wait: true})
	opDone(t, op, err, &rr)
	sealedRow(s2, rr.Sandbox.ID)
	if got := printenv(s2, rr.Sandbox.ID); got != testSecret {
		t.Fatalf("restored on the replacement: %q", got)
	}
}

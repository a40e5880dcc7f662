package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
)

// TestSecretReachesTheSandboxButNoHostStorage is the must-show of tenant
// secrets: a secret set through the CLI (value on stdin), referenced by a
// sandbox, reaches its service (which writes the value's hash to its disk),
// an exec (printenv) and a file on a tmpfs; a snapshot, a push and a
// restore carry the reference (the restored sandbox gets the value from
// the daemon, and another daemon's restore needs the secret set there);
// and the value is absent from the database files, the pool
// (every file of it, and every data extent of its btrfs image), the
// repository, the restored root, the daemon's host-side run directory, its
// log and the audit export. A control step then puts the value where each
// of those greps looks (a file in the sandbox, a key-value entry, a request
// path) and checks that each grep finds it, so an absence means something.
func TestSecretReachesTheSandboxButNoHostStorage(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	d := newDaemon(t, "--repo", repoDir)
	ctx := ctxT(t)
	if _, err := d.c.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	var rnd [32]byte
	rand.Read(rnd[:])
	value := "sk-e2e-" + hex.EncodeToString(rnd[:])
	sum := sha256.Sum256([]byte(value))
	wantHash := hex.EncodeToString(sum[:])

	// Set through the CLI, the value on stdin (with the newline echo adds).
	if code, out := d.cliStdin(value+"\n", "secret", "set", "OPENAI_API_KEY"); code != 0 || !strings.Contains(out, "OPENAI_API_KEY set") {
		t.Fatalf("secret set: exit %d: %s", code, out)
	}
	if _, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "nokey", Secrets: []string{"ANTHROPIC_API_KEY"}}); !client.IsInvalid(err) || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Fatalf("create with an unset secret: %v", err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Name: "agent", Secrets: []string{"OPENAI_API_KEY"}, SecretFiles: []string{"OPENAI_API_KEY=/run/secrets/openai"},
		Service: &client.Service{Command: []string{"sh", "-c", `printf %s "$OPENAI_API_KEY" | sha256sum | cut -d' ' -f1 > /workspace/key.sha256; exec sleep 1d`}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(ctx, sb.ID, "agent", "printenv OPENAI_API_KEY"); got != value+"\n" {
		t.Fatalf("exec printenv: %q", got)
	}
	if got := d.sh(ctx, sb.ID, "agent", "cat /run/secrets/openai; stat -c ' %a %U' /run/secrets/openai; stat -f -c ' %T' /run/secrets"); got != value+" 400 agent\n tmpfs\n" {
		t.Fatalf("secret file: %q", got)
	}
	if got := d.sh(ctx, sb.ID, "agent", "for i in $(seq 100); do [ -s /workspace/key.sha256 ] && break; sleep 0.05; done; cat /workspace/key.sha256"); got != wantHash+"\n" {
		t.Fatalf("the service saw a value hashing to %q, want %q", got, wantHash)
	}
	if left, _ := filepath.Glob(filepath.Join(d.runDir, "stage", "*secrets*")); len(left) > 0 {
		t.Fatalf("the start's secret staging is left on the host: %v", left)
	}
	code, out := d.cliAll("secret", "ls")
	if code != 0 || !strings.Contains(out, "OPENAI_API_KEY") || !strings.Contains(out, "agent") || strings.Contains(out, value) {
		t.Fatalf("secret ls: exit %d: %s", code, out)
	}
	if code, out := d.cliAll("secret", "rm", "OPENAI_API_KEY"); code != 4 || !strings.Contains(out, "agent") {
		t.Fatalf("secret rm while in use: exit %d: %s", code, out)
	}

	// A snapshot, a push and a restore carry the reference, not the value.
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var pushed client.PushResult
	op, err := d.c.Push(ctx, sb.ID, client.PushRequest{Snapshot: snap.ID, Wait: true})
	opResult(t, op, err, &pushed)
	var rr client.RestoreResult
	op, err = d.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pushed.RemoteSnapshot.ID, Name: "restored", NoStart: true, Wait: true})
	opResult(t, op, err, &rr)
	if len(rr.Sandbox.Secrets) != 2 || rr.Sandbox.Secrets[0].Name != "OPENAI_API_KEY" {
		t.Fatalf("restored sandbox's references: %+v", rr.Sandbox.Secrets)
	}
	if _, err := d.c.StartSandbox(ctx, rr.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	if got := d.sh(ctx, rr.Sandbox.ID, "agent", "printenv OPENAI_API_KEY"); got != value+"\n" {
		t.Fatalf("restored sandbox's exec: %q", got)
	}

	// Absent everywhere on the host side.
	places := secretPlaces(t, d, repoDir, []string{sb.ID, rr.Sandbox.ID}, snap.ID)
	for what, found := range places.grep(value) {
		if found {
			t.Errorf("the secret's value is in %s", what)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// The trail records the set, by name.
	if a := places.text["the audit export"]; !strings.Contains(a, `"action":"PUT /v1/secrets/{name}","target":"OPENAI_API_KEY"`) {
		t.Fatalf("the audit trail does not record the set of OPENAI_API_KEY:\n%s", a)
	}

	// Another daemon with the repository and its key, but not the secret:
	// the push names it, so a restore that would start is refused naming
	// it, one without start restores and its start says what is missing;
	// set there, the secret reaches the restored sandbox.
	d2 := newDaemon(t, "--repo", repoDir, "--repo-key-file", filepath.Join(d.dataDir, "repo.key"))
	op, err = d2.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pushed.RemoteSnapshot.ID, Wait: true})
	if msg := opError(op, err); !strings.Contains(msg, "secret OPENAI_API_KEY is not set") {
		t.Fatalf("restore elsewhere without the secret: %q", msg)
	}
	op, err = d2.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pushed.RemoteSnapshot.ID, NoStart: true, Wait: true})
	opResult(t, op, err, &rr)
	if _, err := d2.c.StartSandbox(ctx, rr.Sandbox.ID); !client.IsInvalid(err) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("start elsewhere without the secret: %v", err)
	}
	other := "elsewhere-" + value[:12]
	if _, err := d2.c.SetSecret(ctx, "OPENAI_API_KEY", other); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.c.StartSandbox(ctx, rr.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	otherSum := sha256.Sum256([]byte(other))
	// The service hashes what it got at this start (the file came with the
	// push, holding the first daemon's hash, until it rewrites it).
	script := "printenv OPENAI_API_KEY; for i in $(seq 100); do [ \"$(cat /workspace/key.sha256)\" = " + hex.EncodeToString(otherSum[:]) + " ] && break; sleep 0.05; done; cat /workspace/key.sha256"
	if got := d2.sh(ctx, rr.Sandbox.ID, "agent", script); got != other+"\n"+hex.EncodeToString(otherSum[:])+"\n" {
		t.Fatalf("restored elsewhere: %q", got)
	}

	// Control: put the value where each grep looks; each must find it.
	d.sh(ctx, sb.ID, "agent", "printenv OPENAI_API_KEY > /workspace/control.txt")
	if _, err := d.c.PutKV(ctx, sb.ID, "control", []byte(`"`+value+`"`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.GetSandbox(ctx, value); !client.IsNotFound(err) {
		t.Fatalf("control get: %v", err)
	}
	if _, err := d.c.StopSandbox(ctx, value); !client.IsNotFound(err) {
		t.Fatalf("control stop: %v", err)
	}
	snap2, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	op, err = d.c.Push(ctx, sb.ID, client.PushRequest{Snapshot: snap2.ID, Wait: true})
	opResult(t, op, err, &pushed)
	op, err = d.c.RestoreRemote(ctx, client.RestoreRequest{Snapshot: pushed.RemoteSnapshot.ID, Name: "restored2", NoStart: true, Wait: true})
	opResult(t, op, err, &rr)
	places = secretPlaces(t, d, repoDir, []string{sb.ID, rr.Sandbox.ID}, snap2.ID)
	for what, found := range places.grep(value) {
		if !found && what != "the repository (sealed)" && what != "the host-side run directory" {
			t.Errorf("control: the grep of %s does not find the value written there", what)
		}
	}
}

// opError is the error of a waited-for operation: its request's or its own.
func opError(op client.Operation, err error) string {
	if err != nil {
		return err.Error()
	}
	return op.Error
}

// cliStdin runs the CLI against d with stdin and returns its exit code and
// its output.
func (d *daemon) cliStdin(stdin string, args ...string) (int, string) {
	d.t.Helper()
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(os.Environ(), "STEAD_ENDPOINT=http://"+d.addr, "STEAD_API_KEY="+d.key)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	d.t.Fatalf("run stead %v: %v", args, err)
	return 0, ""
}

// hostPlaces are the host-side places a secret's value must never reach.
type hostPlaces struct {
	t     *testing.T
	trees map[string]string // what → directory walked
	files map[string]string // what → sparse file read by data extents
	text  map[string]string // what → text already read
}

// secretPlaces gathers d's host-side places: its database files, the
// roots of sandboxes and a snapshot in the pool, the pool's btrfs image,
// the repository, its run directory, its log and its audit export.
func secretPlaces(t *testing.T, d *daemon, repoDir string, sandboxes []string, snapshot string) hostPlaces {
	t.Helper()
	ctx := ctxT(t)
	unix.Sync() // the pool image holds what btrfs has written back
	var audit bytes.Buffer
	if err := d.c.ExportAudit(ctx, client.AuditQuery{}, &audit); err != nil {
		t.Fatal(err)
	}
	p := hostPlaces{t: t,
		trees: map[string]string{
			"the repository (sealed)":     repoDir,
			"the host-side run directory": d.runDir,
			"the snapshot":                filepath.Join(d.dataDir, "pool", "snapshots", snapshot),
		},
		files: map[string]string{"the pool's btrfs image": filepath.Join(d.dataDir, "pool.img")},
		text:  map[string]string{"the daemon's log": d.logText(), "the audit export": audit.String()},
	}
	for i, id := range sandboxes {
		p.trees["the root of sandbox "+itoa(i)] = d.rootDir(id)
	}
	var db strings.Builder
	paths, _ := filepath.Glob(filepath.Join(d.dataDir, "stead.db*"))
	if len(paths) == 0 {
		t.Fatal("no database files")
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		db.Write(b)
	}
	p.text["the database files"] = db.String()
	return p
}

// grep reports, per place, whether value is in it.
func (p hostPlaces) grep(value string) map[string]bool {
	out := map[string]bool{}
	for what, s := range p.text {
		out[what] = strings.Contains(s, value)
	}
	for what, dir := range p.trees {
		found, err := treeContains(dir, []byte(value))
		if err != nil {
			p.t.Fatalf("grep %s: %v", what, err)
		}
		out[what] = found
	}
	for what, f := range p.files {
		found, err := sparseContains(f, []byte(value))
		if err != nil {
			p.t.Fatalf("grep %s: %v", what, err)
		}
		out[what] = found
	}
	return out
}

// treeContains reports whether a regular file under dir holds needle (or a
// symlink's target, or a name, does). Symlinks are not followed.
func treeContains(dir string, needle []byte) (bool, error) {
	found := false
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if found {
			return filepath.SkipAll
		}
		if bytes.Contains([]byte(e.Name()), needle) {
			found = true
			return nil
		}
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			found = bytes.Contains([]byte(target), needle)
		case e.Type().IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return nil // a file that went away
			}
			defer f.Close()
			found, err = readerContains(f, needle)
			return err
		}
		return nil
	})
	return found, err
}

// sparseContains reports whether the data extents of file hold needle
// (holes are skipped: a 24 GiB sparse image reads in its used size).
func sparseContains(path string, needle []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var off int64
	for {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return false, err
		}
		// Read a little before the extent in case the needle straddles a
		// boundary the file system reports between two extents.
		from := max(start-int64(len(needle)), 0)
		found, err := readerContains(io.NewSectionReader(f, from, end-from), needle)
		if found || err != nil {
			return found, err
		}
		off = end
	}
}

// readerContains reports whether r holds needle, reading in chunks that
// overlap by len(needle)-1 bytes.
func readerContains(r io.Reader, needle []byte) (bool, error) {
	buf := make([]byte, 4<<20)
	keep := 0
	for {
		n, err := r.Read(buf[keep:])
		if bytes.Contains(buf[:keep+n], needle) {
			return true, nil
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		total := keep + n
		keep = min(len(needle)-1, total)
		copy(buf, buf[total-keep:total])
	}
}

package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// logRotateLines lines of 100 bytes make exactly 200 MiB.
const (
	logRotateLines = 200 << 20 / 100
	logRotateMax   = 16 << 20
	logRotateKeep  = 4
)

// logFilesOf lists the agent log files (agent.log*) in a sandbox root and
// their total size.
func logFilesOf(t *testing.T, root string) (map[string]int64, int64) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "var/log"))
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	var total int64
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "agent.log") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // rotated away meanwhile
		}
		sizes[e.Name()] = fi.Size()
		total += fi.Size()
	}
	return sizes, total
}

// logDigests hashes every file of the rotating log, indexes included.
func logDigests(t *testing.T, root string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "var/log"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if !strings.Contains(e.Name(), "agent.log") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, "var/log", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = hex.EncodeToString(sum[:])
	}
	return out
}

// numberedLines checks a log read: the service's lines (the supervisor's
// "[stead" lines are skipped) are numbered consecutively; it returns the
// first and the last number and whether "done" came after the last.
func numberedLines(r io.Reader, stopAt int) (first, last int, done bool, err error) {
	sc := bufio.NewScanner(r)
	first, last = -1, -1
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "[stead "):
			continue
		case line == "done":
			done = true
			continue
		}
		if len(line) != 99 {
			return first, last, done, fmt.Errorf("after line %d: a line of %d bytes: %.60q", last, len(line), line)
		}
		n, err := strconv.Atoi(line[:9])
		if err != nil {
			return first, last, done, fmt.Errorf("after line %d: %.60q", last, line)
		}
		if first < 0 {
			first = n
		} else if n != last+1 {
			return first, last, done, fmt.Errorf("line %d follows line %d", n, last)
		}
		last = n
		if n == stopAt {
			return first, last, done, nil
		}
	}
	if err := sc.Err(); err != nil {
		return first, last, done, fmt.Errorf("read the log after line %d: %w", last, err)
	}
	return first, last, done, nil
}

// TestLogRotationFollowsEveryLineAndSurvivesStopStartAndPushRestore is the
// issue's "must show": a service writing 200 MiB of numbered lines at full
// speed with a 16 MiB rotation size. A follow started before the service
// receives every line exactly once, in order, across a dozen rotations; the
// log files never take more than 16 MiB × (keep+1) = 80 MiB (plus, for the
// instant between a compression's rename and the removal of its plain
// source, that compressed file: the bound checked is 80 MiB + 4 MiB); after
// stop/start the files are there and `stead logs` prints the same tail; a
// push and a restore into a new sandbox keep every log file bit for bit.
func TestLogRotationFollowsEveryLineAndSurvivesStopStartAndPushRestore(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	d := newDaemon(t, "--repo", repoDir)
	ctx := ctxT(t)
	if _, err := d.c.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	svc := func(lc *client.LogConfig) *client.Service {
		return &client.Service{Command: []string{"true"}, Restart: "never", Log: lc}
	}
	keep := func(n int) *int { return &n }

	// Bad rotation settings: a 4xx, and nothing is created.
	for _, lc := range []*client.LogConfig{{MaxSize: "512KiB"}, {MaxSize: "16MiB", Keep: keep(101)}, {MaxSize: "sixteen"}} {
		_, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "bad", Service: svc(lc), NoStart: true})
		if code := client.StatusCode(err); code < 400 || code >= 500 {
			t.Fatalf("log %+v: %v (status %d), want a 4xx", lc, err, code)
		}
	}
	if l, err := d.c.ListSandboxes(ctx, true); err != nil || len(l) != 0 {
		t.Fatalf("refused creates left %d sandboxes: %v", len(l), err)
	}

	// The CLI's flags, shown by info.
	// The service writes once: a start after a stop finds its marker.
	script := fmt.Sprintf(`if [ ! -e "$HOME/.logged" ]; then seq -f '%%09.0f %s' 1 %d; touch "$HOME/.logged"; echo done; fi; exec sleep 1d`,
		strings.Repeat("x", 89), logRotateLines)
	code, out, errOut := d.cli("create", "logger", "--no-start", "--restart", "never",
		"--log-max-size", "16MiB", "--log-keep", strconv.Itoa(logRotateKeep), "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("stead create: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := d.cli("info", "logger"); code != 0 || !strings.Contains(out, "at 16MiB, 4 kept") {
		t.Fatalf("stead info: %d\n%s", code, out)
	}
	root := d.rootDir(id)

	// Follow from before the service starts.
	fctx, cancel := context.WithTimeout(ctx, 100*time.Second)
	defer cancel()
	rc, err := d.c.ReadLogs(fctx, id, client.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type result struct {
		first, last int
		err         error
	}
	followed := make(chan result, 1)
	go func() {
		first, last, _, err := numberedLines(rc, logRotateLines)
		followed <- result{first, last, err}
	}()

	// Watch the files' total size while the service writes.
	var maxTotal atomic.Int64
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := os.Stat(filepath.Join(root, "var/log")); err != nil {
				continue
			}
			if _, total := logFilesOf(t, root); total > maxTotal.Load() {
				maxTotal.Store(total)
			}
		}
	}()
	began := time.Now()
	if _, err := d.c.StartSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-followed:
	case <-fctx.Done():
		t.Fatal("the follow did not receive every line in time")
	}
	if res.err != nil || res.first != 1 || res.last != logRotateLines {
		t.Fatalf("followed lines %d..%d, want 1..%d: %v", res.first, res.last, logRotateLines, res.err)
	}
	t.Logf("followed lines %d..%d (200 MiB) in %s", res.first, res.last, time.Since(began).Round(time.Millisecond))
	cancel()

	// The service ends with "done"; then the compressions settle.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.sh(ctx, id, "root", "tail -c 200 /var/log/agent.log"), "done") {
		if time.Now().After(deadline) {
			t.Fatal("the service did not finish")
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stopWatch)
	<-watchDone
	const bound = logRotateMax*(logRotateKeep+1) + 4<<20
	if m := maxTotal.Load(); m > bound || m < logRotateMax {
		t.Fatalf("the log files took up to %d bytes; bound %d", m, bound)
	}
	t.Logf("the log files took at most %.1f MiB (bound %d MiB)", float64(maxTotal.Load())/(1<<20), bound>>20)

	// Stop/start: the rotated files stay as they were, and the log reads
	// the same (the supervisor only appends its lines).
	read := func(id string) string {
		t.Helper()
		code, out, errOut := d.cli("logs", id)
		if code != 0 {
			t.Fatalf("stead logs: %d %s", code, errOut)
		}
		return out
	}
	before := read(id)
	if _, err := d.c.StopSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	stopped := logDigests(t, root)
	sizes, total := logFilesOf(t, root)
	if total > logRotateMax*(logRotateKeep+1) || len(sizes) != logRotateKeep+1 {
		t.Fatalf("after the stop: %d bytes in %v", total, sizes)
	}
	for n := 1; n <= logRotateKeep; n++ {
		if _, ok := sizes[fmt.Sprintf("agent.log.%d.gz", n)]; !ok {
			t.Fatalf("agent.log.%d.gz is missing: %v", n, sizes)
		}
	}
	if _, err := d.c.StartSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	after := read(id)
	if !strings.HasPrefix(after, before) {
		t.Fatal("the log read after stop/start does not continue the one before")
	}
	first, last, done, err := numberedLines(strings.NewReader(after), 0)
	if err != nil || last != logRotateLines || !done || first < 2 {
		t.Fatalf("stead logs after stop/start: lines %d..%d, done %v: %v", first, last, done, err)
	}
	for name, sum := range logDigests(t, root) {
		if strings.Contains(name, ".gz") && stopped[name] != sum {
			t.Fatalf("%s changed across stop/start", name)
		}
	}
	// --since: nothing of the 200 MiB was written in the future; all of
	// it since before the sandbox started.
	if code, out, _ := d.cli("logs", id, "--since", began.Add(-time.Minute).UTC().Format(time.RFC3339)); code != 0 || out != after {
		t.Fatalf("logs --since before the start: %d, %d bytes of %d", code, len(out), len(after))
	}
	if code, out, _ := d.cli("logs", id, "--since", "0s"); code != 0 || len(out) > 4096 {
		t.Fatalf("logs --since now: %d, %d bytes", code, len(out))
	}

	// Push (stopped, so nothing changes meanwhile) and restore into a new
	// sandbox: every log file comes back bit for bit.
	if _, err := d.c.StopSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	pushed := logDigests(t, root)
	op, err := d.c.Push(ctx, id, client.PushRequest{Wait: true})
	opResult(t, op, err, nil)
	var rr client.RestoreResult
	op, err = d.c.RestoreRemote(ctx, client.RestoreRequest{Sandbox: id, Name: "restored", NoStart: true, Wait: true})
	opResult(t, op, err, &rr)
	restored := logDigests(t, d.rootDir(rr.Sandbox.ID))
	if len(restored) != len(pushed) || len(pushed) < logRotateKeep+2 {
		t.Fatalf("restored log files %v, pushed %v", keys(restored), keys(pushed))
	}
	for name, sum := range pushed {
		if restored[name] != sum {
			t.Fatalf("%s differs after push/restore", name)
		}
	}
	if got := read(rr.Sandbox.ID); got != read(id) {
		t.Fatal("stead logs of the restored sandbox differs")
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestLogsNeverFollowTheAgentsSymlinks: the agent (root in its sandbox)
// plants agent.log.1, agent.log.2.gz and agent.log as symlinks to a host
// file, and swaps them and /var/log itself between symlinks and real files
// as fast as it can while the daemon reads the log a hundred times: no read
// shows the host file, and the host file is unchanged.
func TestLogsNeverFollowTheAgentsSymlinks(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "shadow")
	if err := os.WriteFile(secret, []byte("root:HOST-SECRET-HASH:19000::::::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "agent.log"), []byte("HOST-SECRET in a host agent.log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "hostile",
		Service: &client.Service{Command: []string{"sh", "-c", "while :; do echo tick; sleep 0.01; done"}}})
	if err != nil {
		t.Fatal(err)
	}
	swap := fmt.Sprintf(`cd /var/log
		i=0
		while :; do
			for n in agent.log.1 agent.log.2.gz agent.log.3; do
				ln -sfn %[1]s $n.x && mv -f $n.x $n
				echo decoy > $n.y && mv -f $n.y $n
			done
			if [ $((i %% 4)) = 0 ]; then
				mv -T /var/log /var/log.real && ln -sfn %[2]s /var/log
				sleep 0.001
				rm -f /var/log && mv -T /var/log.real /var/log
			fi
			i=$((i+1))
		done`, secret, secretDir)
	if _, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", swap}, User: "root", Background: true}); err != nil {
		t.Fatal(err)
	}
	var ticks, decoys int
	// At least 100 reads, and on until the adversary's files were met (a
	// loaded machine may start it late), for at most 60 s.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 100 || ((ticks == 0 || decoys == 0) && time.Now().Before(deadline)); i++ {
		rc, err := d.c.ReadLogs(ctx, sb.ID, client.LogOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "HOST-SECRET") {
			t.Fatalf("read %d showed the host file", i)
		}
		if strings.Contains(string(b), "tick") {
			ticks++
		}
		if strings.Contains(string(b), "decoy") {
			decoys++
		}
	}
	// The adversary ran: some reads met its regular files, and the log of
	// the service itself was read.
	if ticks == 0 || decoys == 0 {
		t.Fatalf("%d reads showed the service's output and %d the adversary's files", ticks, decoys)
	}
	t.Logf("%d reads showed the service's output and %d the adversary's regular files", ticks, decoys)
	if b, _ := os.ReadFile(secret); !strings.HasPrefix(string(b), "root:HOST-SECRET-HASH") {
		t.Fatalf("the host file changed: %q", b)
	}
	// The adversary still swaps /var/log itself for a symlink now and
	// then: look a few times.
	var out string
	for range 50 {
		if out = d.sh(ctx, sb.ID, "root", "ls -la /var/log/ | head -20"); strings.Contains(out, "agent.log") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "agent.log") {
		t.Fatalf("no agent log in the sandbox:\n%s", out)
	}

	// A bad --since is a 400; another tenant's sandbox answers as an
	// absent one, follow or not.
	if _, err := d.c.ReadLogs(ctx, sb.ID, client.LogOptions{Since: "yesterday"}); client.StatusCode(err) != 400 {
		t.Fatalf("since yesterday: %v", err)
	}
	if _, err := d.c.CreateTenant(ctx, client.CreateTenantRequest{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	k, err := d.c.WithTenant("other").CreateKey(ctx, client.CreateAPIKeyRequest{Name: "ops", Role: client.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	other := keyClient(t, d, k.Secret)
	for _, opts := range []client.LogOptions{{}, {Follow: true}, {Since: "1h"}} {
		_, errOther := other.ReadLogs(ctx, sb.ID, opts)
		_, errAbsent := other.ReadLogs(ctx, "sb-absent0000000", opts)
		if !client.IsNotFound(errOther) || !client.IsNotFound(errAbsent) {
			t.Fatalf("another tenant's logs %+v: %v; absent: %v", opts, errOther, errAbsent)
		}
	}
}

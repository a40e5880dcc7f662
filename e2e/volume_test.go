package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
)

// TestTwoSandboxesShareAVolumeWithWorkingLocks: two sandboxes increment one
// counter in a SQLite database (WAL; POSIX fcntl locks) on a shared volume
// and one counter in a flock'd file, 10,000 times each: no lost update, no
// corrupt database. The volume outlives both sandboxes.
func TestTwoSandboxesShareAVolumeWithWorkingLocks(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "shared", SizeBytes: 512 << 20}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range []string{"writer-a", "writer-b"} {
		sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: name, Volumes: []client.VolumeMount{{Volume: "shared", Path: "/data"}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	d.sh(ctx, ids[0], "agent", `sqlite3 /data/c.db "PRAGMA journal_mode=WAL; CREATE TABLE c(n INTEGER); INSERT INTO c VALUES(0);" >/dev/null && echo 0 > /data/counter`)
	const n = 10000
	sqlLoop := `awk 'BEGIN{print ".timeout 60000"; print "PRAGMA synchronous=NORMAL;"; for(i=0;i<10000;i++) print "BEGIN IMMEDIATE; UPDATE c SET n=n+1; COMMIT;"}' | sqlite3 /data/c.db`
	flockLoop := `perl -e 'use Fcntl qw(:flock SEEK_SET); for (1..10000) { open(my $f, "+<", "/data/counter") or die "open: $!"; flock($f, LOCK_EX) or die "flock: $!"; my $v = <$f>; seek($f, 0, SEEK_SET); truncate($f, 0); print $f ($v + 1), "\n"; close($f) or die }'`
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for _, id := range ids {
		for _, script := range []string{sqlLoop, flockLoop} {
			wg.Add(1)
			go func(id, script string) {
				defer wg.Done()
				res, err := d.c.Exec(context.Background(), id, client.ExecRequest{Command: []string{"sh", "-c", script}, Timeout: "5m"})
				if err != nil || res.ExitCode != 0 {
					errs <- id + ": " + strings.TrimSpace(string(res.Stderr)) + " " + errString(err)
				}
			}(id, script)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	out := d.sh(ctx, ids[1], "agent", `sqlite3 /data/c.db "PRAGMA integrity_check; SELECT n FROM c;"; cat /data/counter`)
	if want := "ok\n20000\n20000\n"; out != want {
		t.Fatalf("after %d increments from each of two sandboxes: %q, want %q", n, out, want)
	}
	// The volume survives the deletion of every sandbox that used it.
	for _, id := range ids {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Volume: "shared", Path: "/v", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.sh(ctx, sb.ID, "agent", "cat /v/counter"); got != "20000\n" {
		t.Fatalf("volume after its sandboxes were purged: %q", got)
	}
}

// TestFullVolumeGivesENOSPCInsideAndHarmsNothingElse.
func TestFullVolumeGivesENOSPCInsideAndHarmsNothingElse(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	if _, err := d.c.CreateVolume(ctx, client.CreateVolumeRequest{Name: "small", SizeBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Volume: "small", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", "head -c 100M /dev/urandom > /data/big && sync"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "quota") && !strings.Contains(string(res.Stderr), "space") {
		t.Fatalf("100 MiB fit in a 32 MiB volume: %+v %q", res.ExitCode, res.Stderr)
	}
	// The sandbox's own root is unaffected.
	d.sh(ctx, sb.ID, "agent", "head -c 50M /dev/zero > /workspace/ok && rm /workspace/ok /data/big")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

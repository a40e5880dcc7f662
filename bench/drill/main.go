// Command drill measures the recovery time an empty-data-dir drill reports
// (`stead drill SANDBOX --empty-data-dir`): a fresh daemon restores the
// sandbox's latest push, the tree is verified against the manifest, the
// sandbox starts and a verify command runs. It starts a real `stead serve`
// (btrfs pool on a loop image, a local-directory repository) for each
// binary given, fills a sandbox with -mb MiB of incompressible data plus a
// tree of small files, pushes it once and runs -n drills.
//
//	go run ./bench/drill -n 3 -stead bin/stead -before /tmp/stead-before/bin/stead
//
// prints one row per binary, so an old build (-before) and the current one
// compare in one run on one machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

func main() {
	var n, mb, files int
	var bin, before string
	flag.IntVar(&n, "n", 3, "drills per binary")
	flag.IntVar(&mb, "mb", 88, "MiB of random data in the sandbox")
	flag.IntVar(&files, "files", 2000, "small files (4 KiB) in the sandbox besides the data")
	flag.StringVar(&bin, "stead", "bin/stead", "stead binary")
	flag.StringVar(&before, "before", "", "an older stead binary to measure in the same run (optional)")
	flag.Parse()
	ctx := context.Background()
	type row struct {
		name          string
		pool          string
		rec, restore  []time.Duration
		bytes, nfiles int64
	}
	var rows []row
	bins := [][2]string{}
	if before != "" {
		bins = append(bins, [2]string{"before", before})
	}
	bins = append(bins, [2]string{"after", bin})
	for _, b := range bins {
		r := row{name: b[0] + " (" + b[1] + ")"}
		var err error
		r.rec, r.restore, r.bytes, r.nfiles, r.pool, err = measure(ctx, b[1], n, mb, files)
		if err != nil {
			fmt.Fprintf(os.Stderr, "drill bench %s: %v\n", b[1], err)
			os.Exit(1)
		}
		rows = append(rows, r)
	}
	fmt.Printf("| binary | drill pool | files | bytes | recovery p50 | recovery min | restore p50 |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %d | %d | %.2f s | %.2f s | %.2f s |\n", r.name, r.pool, r.nfiles, r.bytes,
			benchd.Series{D: r.rec}.Pct(0.5).Seconds(), benchd.Series{D: r.rec}.Pct(0).Seconds(), benchd.Series{D: r.restore}.Pct(0.5).Seconds())
	}
}

// measure runs n drills of one sandbox on a daemon of bin.
func measure(ctx context.Context, bin string, n, mb, files int) (rec, restore []time.Duration, bytes, nfiles int64, pool string, err error) {
	repoDir, err := os.MkdirTemp("", "stead-drill-repo-")
	if err != nil {
		return
	}
	defer os.RemoveAll(repoDir)
	d, err := benchd.Start(ctx, bin, "btrfs", 24, "--repo", repoDir)
	if err != nil {
		return
	}
	defer d.Close()
	c := d.Client
	if _, err = c.InitRepo(ctx); err != nil {
		return
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "drilled"})
	if err != nil {
		return
	}
	fill := fmt.Sprintf(`set -e
		head -c %d /dev/urandom > /workspace/data.bin
		mkdir -p /workspace/src && cd /workspace/src
		i=0; while [ $i -lt %d ]; do head -c 4096 /dev/urandom > f$i; i=$((i+1)); done`, mb<<20, files)
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", fill}, User: "root", Timeout: "10m"})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("fill: exit %d: %s", res.ExitCode, res.Stderr)
	}
	if err != nil {
		return
	}
	op, err := c.Push(ctx, sb.ID, client.PushRequest{Wait: true})
	if err == nil && op.State != "succeeded" {
		err = fmt.Errorf("push: %s", op.Error)
	}
	if err != nil {
		return
	}
	for i := 0; i < n; i++ {
		var op client.Operation
		op, err = c.Drill(ctx, sb.ID, client.DrillRequest{EmptyDataDir: true, Verify: []string{"test", "-s", "/workspace/data.bin"}, Wait: true})
		if err == nil && op.EndedAt == nil {
			op, err = c.WaitOperation(ctx, op, nil)
		}
		if err != nil {
			return
		}
		var dr client.Drill
		if err = json.Unmarshal(op.Result, &dr); err != nil {
			return
		}
		if !dr.OK {
			err = fmt.Errorf("drill failed: %s", dr.Error)
			return
		}
		rec = append(rec, time.Duration(dr.RecoverySeconds*float64(time.Second)))
		restore = append(restore, time.Duration(dr.RestoreSeconds*float64(time.Second)))
		bytes, nfiles = dr.Bytes, int64(dr.Files)
	}
	pool = drillPool(filepath.Join(filepath.Dir(d.Data()), "daemon.log"))
	return
}

// drillPool reads the drill's pool kind from the daemon log (a binary
// that does not log it is the old drill, which always used the dir pool).
func drillPool(log string) string {
	b, _ := os.ReadFile(log)
	s := string(b)
	i := strings.Index(s, "drill: starting a fresh daemon")
	if i < 0 {
		return "dir (old drill)"
	}
	j := strings.Index(s[i:], "pool=")
	if j < 0 {
		return "?"
	}
	kind := strings.Fields(s[i+j+len("pool="):])
	if len(kind) == 0 {
		return "?"
	}
	return kind[0]
}

// Command state measures stead's durable checkpoint commit through the API
// (HTTP to a real daemon; the store fsyncs before it answers) side by side
// with the seed's own patterns run on the same disk in one run
// (seed_patterns.py: a JSON file written with fsync and renamed, and a
// SQLite WAL insert with synchronous=FULL).
//
//	sudo go run ./bench/state -stead bin/stead
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
)

func main() {
	n := flag.Int("n", 500, "commits per pattern")
	bin := flag.String("stead", "bin/stead", "stead binary (static build: scripts/build.sh)")
	flag.Parse()
	if err := run(*n, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n int, bin string) error {
	ctx := context.Background()
	d, err := benchd.Start(ctx, bin, "btrfs", 16)
	if err != nil {
		return err
	}
	defer d.Close()
	c := d.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{NoStart: true})
	if err != nil {
		return err
	}
	rows := []benchd.Series{}
	ds, err := benchd.Time(n, func(i int) error {
		body, _ := json.Marshal(map[string]any{"step": i, "notes": strings.Repeat("x", 200)})
		_, err := c.PutCheckpoint(ctx, sb.ID, "progress", body, client.PutCheckpointOptions{})
		return err
	})
	if err != nil {
		return err
	}
	rows = append(rows, benchd.Series{Name: "stead checkpoint put (HTTP, durable, history kept)", D: ds})

	// Session log append throughput: one event per request, and batches.
	th, err := c.CreateThread(ctx, sb.ID, client.CreateThreadRequest{Name: "bench"})
	if err != nil {
		return err
	}
	run, err := c.StartRun(ctx, sb.ID, th.ID)
	if err != nil {
		return err
	}
	payload := json.RawMessage(`{"tool":"search","query":"` + strings.Repeat("q", 60) + `"}`)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := c.AppendEvent(ctx, sb.ID, run.ID, client.AppendEvent{Type: "note", Payload: payload}); err != nil {
			return err
		}
	}
	single := float64(n) / time.Since(t0).Seconds()
	const batch, batches = 100, 100
	evs := make([]client.AppendEvent, batch)
	for i := range evs {
		evs[i] = client.AppendEvent{Type: "note", Payload: payload}
	}
	t0 = time.Now()
	for i := 0; i < batches; i++ {
		if _, err := c.AppendEvents(ctx, sb.ID, run.ID, evs); err != nil {
			return err
		}
	}
	batched := float64(batch*batches) / time.Since(t0).Seconds()

	// The seed's patterns, on the disk that holds stead's data dir.
	dir, err := os.MkdirTemp(filepath.Dir(d.Data()), "seed-")
	if err != nil {
		return err
	}
	_, self, _, _ := runtime.Caller(0)
	out, err := exec.Command("python3", filepath.Join(filepath.Dir(self), "seed_patterns.py"), fmt.Sprint(n), dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("seed patterns: %v: %s", err, out)
	}
	fmt.Printf("stead state benchmark: %d commits each, %s\n\n", n, time.Now().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pattern\tp50\tp99\t")
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", s.Name, benchd.Ms(s.Pct(0.5)), benchd.Ms(s.Pct(0.99)))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) == 3 {
			fmt.Fprintf(tw, "%s\t%s ms\t%s ms\t\n", f[0], f[1], f[2])
		}
	}
	tw.Flush()
	fmt.Printf("\nsession log append (HTTP, durable): %.0f events/s one per request, %.0f events/s in batches of 100 (target >= 20,000/s batched)\n", single, batched)
	return nil
}

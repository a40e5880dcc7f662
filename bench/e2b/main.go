// Command e2b measures the E2B-compatible API through the official e2b
// npm SDK (installed into a temporary directory) against stead's own Go
// client, on one daemon started for the run: Sandbox.create → the first
// commands.run('true') → exit, against CreateSandbox → Exec of the same
// command line the SDK runs (/bin/bash -l -c true). The two run in
// alternating rounds so that drift on a shared machine hits both alike;
// it prints p50/p99 of each and the ratio.
//
//	sudo go run ./bench/e2b -n 50 -stead bin/stead
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/e2b"
)

// sdkVersion is the e2b npm package measured.
const sdkVersion = "2.51.0"

// sdkScript creates N sandboxes through the SDK, each timed from
// Sandbox.create to the end of its first commands.run('true'), and
// prints the durations (ms) and the ids as JSON.
const sdkScript = `import { Sandbox } from 'e2b'
const n = Number(process.env.N)
const ms = [], ids = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create({ timeoutMs: 3_600_000 })
  const r = await sbx.commands.run('true')
  ms.push(performance.now() - t0)
  if (r.exitCode !== 0) throw new Error('exit ' + r.exitCode)
  ids.push(sbx.sandboxId)
}
console.log(JSON.stringify({ ms, ids }))
`

func main() {
	n := flag.Int("n", 50, "iterations per path")
	rounds := flag.Int("rounds", 5, "alternating rounds the iterations are split into")
	bin := flag.String("stead", "bin/stead", "stead binary (static build: scripts/build.sh)")
	pool := flag.String("pool", "btrfs", "pool kind")
	flag.Parse()
	if err := run(*n, *rounds, *bin, *pool); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, rounds int, bin, poolKind string) error {
	if rounds < 1 || n < rounds {
		return fmt.Errorf("want 1 <= rounds <= n")
	}
	ctx := context.Background()
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	dir, err := installSDK(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d, err := benchd.Start(ctx, bin, poolKind, 16)
	if err != nil {
		return err
	}
	defer d.Close()
	c := d.Client
	key, err := os.ReadFile(filepath.Join(d.Data(), "admin.key"))
	if err != nil {
		return err
	}
	env := append(os.Environ(), "E2B_API_URL="+c.Endpoint(), "E2B_SANDBOX_URL="+c.Endpoint(),
		"E2B_API_KEY="+e2b.EncodeKey(strings.TrimSpace(string(key))))
	// Warm up both paths: the host template is built on first use, Node
	// loads the SDK.
	if _, err := sdkRound(ctx, node, dir, env, 1, c); err != nil {
		return err
	}
	if _, err := clientRound(ctx, c, 1); err != nil {
		return err
	}
	var sdk, own []time.Duration
	for r := range rounds {
		k := n / rounds
		if r < n%rounds {
			k++
		}
		ds, err := sdkRound(ctx, node, dir, env, k, c)
		if err != nil {
			return err
		}
		sdk = append(sdk, ds...)
		if ds, err = clientRound(ctx, c, k); err != nil {
			return err
		}
		own = append(own, ds...)
	}
	results := []benchd.Series{
		{Name: "e2b SDK " + sdkVersion + ": Sandbox.create → commands.run('true') → exit", D: sdk},
		{Name: "stead Go client: CreateSandbox → Exec /bin/bash -l -c true → exit", D: own},
	}
	base := results[1].Pct(0.5)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "operation (n=%d, %d alternating rounds)\tp50\tp99\tp50 / stead client p50\n", n, rounds)
	for _, s := range results {
		fmt.Fprintf(w, "%s\t%s\t%s\t%.2fx\n", s.Name, benchd.Ms(s.Pct(0.5)), benchd.Ms(s.Pct(0.99)), float64(s.Pct(0.5))/float64(base))
	}
	return w.Flush()
}

// installSDK installs the e2b package into a temporary directory with the
// script beside it.
func installSDK(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "stead-bench-e2b-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"e2b-bench","private":true,"type":"module"}`), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.mjs"), []byte(sdkScript), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "e2b@"+sdkVersion)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("npm install e2b@%s: %v\n%s", sdkVersion, err, out)
	}
	return dir, nil
}

// sdkRound runs k iterations through the SDK and purges what they made.
func sdkRound(ctx context.Context, node, dir string, env []string, k int, c *client.Client) ([]time.Duration, error) {
	cmd := exec.CommandContext(ctx, node, "bench.mjs")
	cmd.Dir = dir
	cmd.Env = append(env, fmt.Sprintf("N=%d", k))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the SDK script: %v\n%s", err, stderr.String())
	}
	var res struct {
		Ms  []float64
		IDs []string
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("the SDK script's output %q: %w", stdout.String(), err)
	}
	out := make([]time.Duration, 0, len(res.Ms))
	for _, m := range res.Ms {
		out = append(out, time.Duration(m*float64(time.Millisecond)))
	}
	for _, id := range res.IDs {
		if _, err := c.DeleteSandbox(ctx, id, true); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// clientRound runs k iterations through stead's Go client and purges
// what they made.
func clientRound(ctx context.Context, c *client.Client, k int) ([]time.Duration, error) {
	var ids []string
	ds, err := benchd.Time(k, func(int) error {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{IdleTimeout: "1h"})
		if err != nil {
			return err
		}
		ids = append(ids, sb.ID)
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: []string{"/bin/bash", "-l", "-c", "true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		return err
	})
	for _, id := range ids {
		if _, err := c.DeleteSandbox(ctx, id, true); err != nil {
			return nil, err
		}
	}
	return ds, err
}

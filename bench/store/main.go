// Command store measures the metadata store's operations on the embedded
// SQLite store and on the PostgreSQL store side by side in one run: both on
// this machine's disk, PostgreSQL as a private server started for the run
// (internal/store/postgres/pgtest; fsync on, over TCP on 127.0.0.1), or the
// server STEAD_TEST_POSTGRES names.
//
//	sudo go run ./bench/store -n 300
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres"
	"github.com/stead-dev/stead/internal/store/postgres/pgtest"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

func main() {
	n := flag.Int("n", 300, "operations per series")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// engine is one store under test.
type engine struct {
	name string
	st   store.Store
}

func run(n int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "stead-bench-store-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lite, err := sqlite.Open(ctx, filepath.Join(dir, "stead.db"))
	if err != nil {
		return err
	}
	defer lite.Close()
	srv, err := pgtest.Launch(ctx)
	if err != nil {
		return err
	}
	defer srv.Stop()
	db, err := srv.CreateDatabase(ctx, "")
	if err != nil {
		return err
	}
	pg, err := postgres.Open(ctx, srv.DSN(db))
	if err != nil {
		return err
	}
	defer pg.Close()
	engines := []engine{{"sqlite", lite}, {"postgres", pg}}

	type op struct {
		name string
		f    func(st store.Store, sb string, i int) error
	}
	ops := []op{
		{"get sandbox (read)", func(st store.Store, sb string, _ int) error {
			_, err := st.GetSandbox(ctx, store.DefaultTenant, sb)
			return err
		}},
		{"update sandbox (read + compare-and-swap write)", func(st store.Store, sb string, _ int) error {
			cur, err := st.GetSandbox(ctx, store.DefaultTenant, sb)
			if err != nil {
				return err
			}
			cur.StopReason = "bench"
			_, err = st.UpdateSandbox(ctx, cur)
			return err
		}},
		{"checkpoint put (versioned document)", func(st store.Store, sb string, i int) error {
			_, err := st.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: store.CheckpointKey{TenantID: store.DefaultTenant, SandboxID: sb, Name: "progress"},
				IfVersion: store.AnyVersion, Body: []byte(fmt.Sprintf(`{"step":%d}`, i)), Principal: "bench"})
			return err
		}},
		{"observation append (seq = max + 1)", func(st store.Store, sb string, _ int) error {
			_, err := st.AppendObservation(ctx, store.ObservationWrite{TenantID: store.DefaultTenant, SandboxID: sb, Kind: "note", Principal: "bench", Payload: []byte(`{}`)})
			return err
		}},
	}
	results := map[string]map[string]benchd.Series{}
	for _, e := range engines {
		sb := "sb-bench"
		if _, err := e.st.CreateSandbox(ctx, store.Sandbox{ID: sb, TenantID: store.DefaultTenant, Name: sb, TemplateID: "host",
			State: store.StateStopped, CreatedAt: time.Now()}); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		results[e.name] = map[string]benchd.Series{}
		for _, o := range ops {
			ds, err := benchd.Time(n, func(i int) error { return o.f(e.st, sb, i) })
			if err != nil {
				return fmt.Errorf("%s %s: %w", e.name, o.name, err)
			}
			results[e.name][o.name] = benchd.Series{Name: o.name, D: ds}
		}
		// Four writers at once: their appends are serialised (SQLite's
		// single writer; PostgreSQL's write lock). Time per append.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var all []time.Duration
		var werr error
		t0 := time.Now()
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds, err := benchd.Time(n/4, func(i int) error { return ops[3].f(e.st, sb, i) })
				mu.Lock()
				defer mu.Unlock()
				all = append(all, ds...)
				if err != nil {
					werr = err
				}
			}()
		}
		wg.Wait()
		if werr != nil {
			return fmt.Errorf("%s concurrent appends: %w", e.name, werr)
		}
		wall := time.Since(t0)
		results[e.name]["4 concurrent appenders"] = benchd.Series{Name: "4 concurrent appenders", D: all}
		results[e.name]["4 concurrent appenders/s"] = benchd.Series{D: []time.Duration{wall / time.Duration(len(all))}}
	}

	fmt.Printf("metadata store, %d operations per series, %s\n\n", n, time.Now().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tsqlite p50\tsqlite p99\tpostgres p50\tpostgres p99\tpostgres / sqlite (p50)\t")
	names := []string{}
	for _, o := range ops {
		names = append(names, o.name)
	}
	names = append(names, "4 concurrent appenders")
	for _, name := range names {
		l, p := results["sqlite"][name], results["postgres"][name]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2fx\t\n", name, benchd.Ms(l.Pct(0.5)), benchd.Ms(l.Pct(0.99)),
			benchd.Ms(p.Pct(0.5)), benchd.Ms(p.Pct(0.99)), float64(p.Pct(0.5))/float64(l.Pct(0.5)))
	}
	l, p := results["sqlite"]["4 concurrent appenders/s"].D[0], results["postgres"]["4 concurrent appenders/s"].D[0]
	fmt.Fprintf(tw, "4 concurrent appenders, throughput\t%.0f/s\t\t%.0f/s\t\t%.2fx\t\n", float64(time.Second)/float64(l), float64(time.Second)/float64(p),
		float64(l)/float64(p))
	return tw.Flush()
}

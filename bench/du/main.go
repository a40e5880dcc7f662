// Command du measures how fast stead tells where the space went (the walk
// behind `stead du`, files.Root.DiskUsage: descriptors only, openat2 with
// RESOLVE_BENEATH, hard links once, top-N lists kept) on a tree of the
// issue's size, side by side with the peers in the same run: coreutils
// `du -s`, `du -a | sort -n | tail` (what a user types to find the largest
// files) and Go's filepath.WalkDir with Lstat (the naive walk that follows
// no rule at all).
//
//	go run ./bench/du -files 23000 -n 20
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"

	"github.com/stead-dev/stead/bench/internal/benchd"
	"github.com/stead-dev/stead/internal/files"
)

func main() {
	nfiles := flag.Int("files", 23000, "files in the tree (100 per directory)")
	n := flag.Int("n", 20, "walks per peer")
	dir := flag.String("dir", "", "where to build the tree (default: a temp dir)")
	flag.Parse()
	if err := run(*dir, *nfiles, *n); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(dir string, nfiles, n int) error {
	base, err := os.MkdirTemp(dir, "stead-du-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	root := filepath.Join(base, "root")
	// A tree like a project checkout: 17 top directories, 100 files each
	// of a few KiB per leaf directory.
	for d := 0; d*100 < nfiles; d++ {
		leaf := filepath.Join(root, fmt.Sprintf("m%d", d%17), fmt.Sprintf("p%d", d))
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return err
		}
		for f := 0; f < 100 && d*100+f < nfiles; f++ {
			if err := os.WriteFile(filepath.Join(leaf, fmt.Sprintf("f%d", f)), make([]byte, 1+(d*100+f)%8192), 0o644); err != nil {
				return err
			}
		}
	}
	r, err := files.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	ctx := context.Background()
	var rows []benchd.Series
	add := func(name string, f func() error) error {
		if err := f(); err != nil { // warm the cache once
			return fmt.Errorf("%s: %w", name, err)
		}
		ds, err := benchd.Time(n, func(int) error { return f() })
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, benchd.Series{Name: name, D: ds})
		return nil
	}
	if err := add("stead du (files.Root.DiskUsage, top 10)", func() error {
		u, err := r.DiskUsage(ctx, "/", files.UsageOptions{})
		if err == nil && u.Files != int64(nfiles) {
			err = fmt.Errorf("%d files, want %d", u.Files, nfiles)
		}
		return err
	}); err != nil {
		return err
	}
	if err := add("du -s", func() error { return exec.Command("du", "-s", root).Run() }); err != nil {
		return err
	}
	if err := add("du -a | sort -n | tail", func() error {
		return exec.Command("sh", "-c", "du -a "+root+" | sort -n | tail -n 10 >/dev/null").Run()
	}); err != nil {
		return err
	}
	if err := add("filepath.WalkDir + Lstat", func() error {
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			_, err = os.Lstat(p)
			return err
		})
	}); err != nil {
		return err
	}
	fmt.Printf("tree: %d files in %d directories; %d walks each (page cache warm)\n\n", nfiles, (nfiles+99)/100+17+1, n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "walk\tp50\tp90\tp50 / du -s p50\t")
	ref := rows[1].Pct(0.5)
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2fx\t\n", s.Name, s.Pct(0.5).Round(10_000), s.Pct(0.9).Round(10_000), float64(s.Pct(0.5))/float64(ref))
	}
	return tw.Flush()
}

// Package fsutil holds small file-system helpers shared by the pool
// implementations.
package fsutil

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/stead-dev/stead/internal/pool"
)

// ApparentSize sums the sizes of the regular files under root, counting a
// hard-linked inode once. It checks ctx between entries.
func ApparentSize(ctx context.Context, root string) (int64, error) {
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var total int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			k := key{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += fi.Size()
		return nil
	})
	return total, err
}

// DatasetSize is the ApparentSize of the dataset name under the pool
// directory dir, with errors worded for Pool.Usage.
func DatasetSize(ctx context.Context, dir, name string) (int64, error) {
	n, err := ApparentSize(ctx, filepath.Join(dir, name))
	if err != nil {
		return 0, fmt.Errorf("dataset %s usage: %w", name, err)
	}
	return n, nil
}

// KindDir creates the directory of kind under the pool directory dir if it
// is missing and returns its path.
func KindDir(dir, kind string) (string, error) {
	path := filepath.Join(dir, kind)
	// 0700: no host user but root may walk into a sandbox's root, where the
	// sandbox may have planted setuid binaries or device nodes.
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return path, nil
}

// Exists reports whether the dataset name (already checked) is a directory
// under the pool directory dir.
func Exists(dir, name string) (bool, error) {
	fi, err := os.Lstat(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat dataset %s: %w", name, err)
	}
	return fi.IsDir(), nil
}

// List returns the ids of kind under the pool directory dir, sorted: the
// directories whose names are valid ids, which leaves out hidden
// temporaries.
func List(dir, kind string) ([]string, error) {
	if _, err := pool.Name(kind, "x"); err != nil {
		return nil, fmt.Errorf("list datasets: %w", err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, kind))
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list datasets %s: %w", kind, err)
	}
	ids := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.IsDir() && pool.ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Package fsutil holds small file-system helpers shared by the pool
// implementations.
package fsutil

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
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

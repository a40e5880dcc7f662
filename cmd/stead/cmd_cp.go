package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// newCpCmd is `stead cp`.
func newCpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DEST_DIR",
		Short: "Copy files and directory trees between the host and a sandbox",
		Long: `Copy a file or a directory tree between the host and a sandbox, as a tar
stream. One side is SANDBOX:PATH. The destination is always a directory:
SRC is copied into it under its own name (the directory is created if
missing). Modes, symlinks and modification times are kept; ownership in a
sandbox is the sandbox's to decide.`,
		Example: `  stead cp ./project agent-1:/workspace        # -> /workspace/project
  stead cp agent-1:/workspace/results ./out     # -> ./out/results
  stead cp agent-1:/etc/os-release .`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			srcID, srcPath, srcRemote := sandboxRef(a[0])
			dstID, dstPath, dstRemote := sandboxRef(a[1])
			switch {
			case srcRemote && dstRemote:
				return usageError{errors.New("cp copies between the host and a sandbox; copy sandbox to sandbox through the host")}
			case !srcRemote && !dstRemote:
				return usageError{errors.New("one side of cp must be SANDBOX:PATH")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if dstRemote {
				src := filepath.Clean(a[0])
				if _, err := os.Lstat(src); err != nil {
					return fmt.Errorf("cp: %w", err)
				}
				pr, pw := io.Pipe()
				var st tarStats
				var tarErr error
				go func() {
					st, tarErr = writeTar(pw, src)
					_ = pw.CloseWithError(tarErr)
				}()
				err := c.UploadTar(ctx, dstID, dstPath, pr)
				_ = pr.CloseWithError(errors.New("upload ended"))
				if tarErr != nil {
					return fmt.Errorf("cp %s: %w", src, tarErr)
				}
				if err != nil {
					return fmt.Errorf("cp to %s:%s: %w", dstID, dstPath, err)
				}
				fmt.Fprintf(g.stderr, "copied %s to %s:%s (%d entries, %s)\n", src, dstID, path.Join(dstPath, filepath.Base(src)),
					st.entries, humanize.IBytes(uint64(st.bytes)))
				return nil
			}
			rc, err := c.DownloadTar(ctx, srcID, srcPath)
			if err != nil {
				return fmt.Errorf("cp from %s:%s: %w", srcID, srcPath, err)
			}
			defer func() { _ = rc.Close() }()
			st, err := extractTar(rc, a[1])
			if err != nil {
				return fmt.Errorf("cp from %s:%s: %w", srcID, srcPath, err)
			}
			fmt.Fprintf(g.stderr, "copied %s:%s to %s (%d entries, %s)\n", srcID, srcPath,
				filepath.Join(a[1], path.Base(srcPath)), st.entries, humanize.IBytes(uint64(st.bytes)))
			return nil
		},
	}
}

// tarStats counts what a tar carried.
type tarStats struct {
	entries int
	bytes   int64
}

// writeTar writes src (a file or a tree) as a tar whose entries are named
// under filepath.Base(src). Sockets and devices are skipped. Owners are
// not recorded: the sandbox decides ownership.
func writeTar(w io.Writer, src string) (tarStats, error) {
	var st tarStats
	tw := tar.NewWriter(w)
	base := filepath.Base(src)
	if abs, err := filepath.Abs(src); err == nil {
		base = filepath.Base(abs)
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(base, filepath.ToSlash(rel))
		link := ""
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsDir(), info.Mode().IsRegular():
		default:
			return nil // sockets, devices, fifos
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("tar header of %s: %w", p, err)
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write tar header of %s: %w", p, err)
		}
		st.entries++
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		n, err := io.CopyN(tw, f, info.Size())
		st.bytes += n
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, tw.Close()
}

// extractTar extracts r under the directory dest (created if missing).
// Entries must stay under dest: absolute names, "..", and writes through
// symlinks pointing out of dest are refused (os.Root).
func extractTar(r io.Reader, dest string) (tarStats, error) {
	var st tarStats
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return st, fmt.Errorf("create %s: %w", dest, err)
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return st, fmt.Errorf("open %s: %w", dest, err)
	}
	defer func() { _ = root.Close() }()

	type dirMeta struct {
		name string
		hdr  *tar.Header
	}
	var dirs []dirMeta
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read tar: %w", err)
		}
		name := path.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return st, fmt.Errorf("refusing tar entry %q: it leaves the destination", hdr.Name)
		}
		name = filepath.FromSlash(name)
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return st, fmt.Errorf("create %s: %w", dir, err)
			}
		}
		perm := os.FileMode(hdr.Mode) & os.ModePerm
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return st, fmt.Errorf("create %s: %w", name, err)
			}
			dirs = append(dirs, dirMeta{name, hdr})
		case tar.TypeReg:
			_ = root.Remove(name)
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
			if err != nil {
				return st, fmt.Errorf("create %s: %w", name, err)
			}
			n, err := io.Copy(f, tr)
			st.bytes += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return st, fmt.Errorf("write %s: %w", name, err)
			}
			_ = root.Chmod(name, perm)
			_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return st, fmt.Errorf("symlink %s: %w", name, err)
			}
		case tar.TypeLink:
			target := path.Clean(hdr.Linkname)
			if !filepath.IsLocal(target) {
				return st, fmt.Errorf("refusing hard link %q -> %q: it leaves the destination", hdr.Name, hdr.Linkname)
			}
			_ = root.Remove(name)
			if err := root.Link(filepath.FromSlash(target), name); err != nil {
				return st, fmt.Errorf("link %s: %w", name, err)
			}
		default:
			continue // devices, fifos
		}
		st.entries++
	}
	// Directory modes and times last, deepest first, so that a read-only
	// directory does not block its own contents.
	slices.Reverse(dirs)
	for _, d := range dirs {
		_ = root.Chmod(d.name, os.FileMode(d.hdr.Mode)&os.ModePerm)
		_ = root.Chtimes(d.name, d.hdr.ModTime, d.hdr.ModTime)
	}
	return st, nil
}

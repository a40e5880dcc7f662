package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newFilesCmd is `stead files` and its subcommands.
func newFilesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "files",
		Short: "Read and write files in a sandbox",
		Long: `Read and write files in a sandbox through the API (the sandbox need not be
running). Paths are absolute paths inside the sandbox. To copy directory
trees between the host and a sandbox use stead cp.`,
		Example: `  stead files ls agent-1 /workspace
  stead files cat agent-1 /workspace/notes.md
  stead files put agent-1 ./config.toml /workspace/config.toml
  stead files rm -r agent-1 /workspace/build`,
	}
	group(cmd)
	cmd.AddCommand(
		newFilesLsCmd(g), newFilesCatCmd(g), newFilesPutCmd(g), newFilesRmCmd(g),
		newFilesMkdirCmd(g), newFilesMvCmd(g), newFilesStatCmd(g),
	)
	return cmd
}

// newFilesLsCmd is `stead files ls`.
func newFilesLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls SANDBOX [PATH]",
		Short:   "List a directory (default /)",
		Example: "  stead files ls agent-1 /workspace",
		Args:    args(1, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			dir := "/"
			if len(a) == 2 {
				dir = a[1]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListFiles(cmd.Context(), a[0], dir)
			if err != nil {
				return fmt.Errorf("list %s:%s: %w", a[0], dir, err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "MODE", "UID", "GID", "SIZE", "MODIFIED", "NAME")
			for _, f := range list {
				name := f.Name
				if f.Type == "dir" {
					name += "/"
				}
				if f.Target != "" {
					name += " -> " + f.Target
				}
				row(tw, modeString(f), strconv.Itoa(f.UID), strconv.Itoa(f.GID), strconv.FormatInt(f.Size, 10),
					f.ModTime.Local().Format("2006-01-02 15:04"), name)
			}
			return tw.Flush()
		},
	}
}

// modeString renders a FileInfo's type and permissions like ls -l.
func modeString(f client.FileInfo) string {
	m := os.FileMode(f.Mode & 0o777)
	switch f.Type {
	case "dir":
		m |= os.ModeDir
	case "symlink":
		m |= os.ModeSymlink
	case "other":
		m |= os.ModeIrregular
	}
	if f.Mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if f.Mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if f.Mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m.String()
}

// newFilesCatCmd is `stead files cat`.
func newFilesCatCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "cat SANDBOX PATH",
		Short:   "Print a file",
		Example: "  stead files cat agent-1 /workspace/notes.md > notes.md",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			rc, _, err := c.ReadFile(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("read %s:%s: %w", a[0], a[1], err)
			}
			defer func() { _ = rc.Close() }()
			if _, err := io.Copy(g.stdout, rc); err != nil {
				return fmt.Errorf("read %s:%s: %w", a[0], a[1], err)
			}
			return nil
		},
	}
}

// newFilesPutCmd is `stead files put`.
func newFilesPutCmd(g *globals) *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:   "put SANDBOX LOCAL_FILE|- PATH",
		Short: "Upload a file (- reads stdin)",
		Example: `  stead files put agent-1 ./config.toml /workspace/config.toml
  echo hello | stead files put --mode 0600 agent-1 - /workspace/secret`,
		Args: args(3, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			var m uint64
			if mode != "" {
				var err error
				if m, err = strconv.ParseUint(mode, 8, 32); err != nil || m > 0o7777 {
					return usageError{fmt.Errorf("--mode %q: want octal permission bits like 0644", mode)}
				}
			}
			var r io.Reader = g.stdin
			if a[1] != "-" {
				f, err := os.Open(a[1])
				if err != nil {
					return fmt.Errorf("open local file: %w", err)
				}
				defer func() { _ = f.Close() }()
				if st, err := f.Stat(); err == nil {
					if st.IsDir() {
						return usageError{fmt.Errorf("%s is a directory; copy trees with stead cp %s %s:%s", a[1], a[1], a[0], path.Dir(a[2]))}
					}
					if mode == "" {
						m = uint64(st.Mode().Perm())
					}
				}
				r = f
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			info, err := c.WriteFile(cmd.Context(), a[0], a[2], uint32(m), r)
			if err != nil {
				return fmt.Errorf("write %s:%s: %w", a[0], a[2], err)
			}
			if g.json {
				return printJSON(g.stdout, info)
			}
			_, err = fmt.Fprintf(g.stdout, "wrote %s:%s (%d bytes)\n", a[0], info.Path, info.Size)
			return err
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "octal permission bits (default: the local file's, or 0644 for stdin)")
	return cmd
}

// newFilesRmCmd is `stead files rm`.
func newFilesRmCmd(g *globals) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:     "rm SANDBOX PATH",
		Short:   "Remove a file or directory",
		Example: "  stead files rm agent-1 /workspace/old.log\n  stead files rm -r agent-1 /workspace/build",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.RemoveFile(cmd.Context(), a[0], a[1], recursive); err != nil {
				return fmt.Errorf("remove %s:%s: %w", a[0], a[1], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything under it")
	return cmd
}

// newFilesMkdirCmd is `stead files mkdir`.
func newFilesMkdirCmd(g *globals) *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:     "mkdir SANDBOX PATH",
		Short:   "Create a directory",
		Example: "  stead files mkdir -p agent-1 /workspace/data/raw",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.Mkdir(cmd.Context(), a[0], a[1], parents); err != nil {
				return fmt.Errorf("mkdir %s:%s: %w", a[0], a[1], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; no error if it exists")
	return cmd
}

// newFilesMvCmd is `stead files mv`.
func newFilesMvCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "mv SANDBOX FROM TO",
		Short:   "Rename or move a file or directory",
		Example: "  stead files mv agent-1 /workspace/draft.md /workspace/final.md",
		Args:    args(3, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.RenameFile(cmd.Context(), a[0], a[1], a[2]); err != nil {
				return fmt.Errorf("move %s:%s: %w", a[0], a[1], err)
			}
			return nil
		},
	}
}

// newFilesStatCmd is `stead files stat`.
func newFilesStatCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "stat SANDBOX PATH",
		Short:   "Describe a file",
		Example: "  stead files stat agent-1 /workspace",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			f, err := c.StatFile(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("stat %s:%s: %w", a[0], a[1], err)
			}
			if g.json {
				return printJSON(g.stdout, f)
			}
			tw := newTable(g.stdout)
			row(tw, "Path:", f.Path)
			row(tw, "Type:", f.Type)
			row(tw, "Size:", strconv.FormatInt(f.Size, 10))
			row(tw, "Mode:", fmt.Sprintf("%s (%04o)", modeString(f), f.Mode&0o7777))
			row(tw, "Owner:", fmt.Sprintf("%d:%d", f.UID, f.GID))
			row(tw, "Modified:", f.ModTime.Local().Format("2006-01-02 15:04:05 MST"))
			if f.Target != "" {
				row(tw, "Target:", f.Target)
			}
			return tw.Flush()
		},
	}
}

// sandboxRef splits "SANDBOX:PATH"; ok is false for a local path. A
// local path containing a colon can be written ./a:b.
func sandboxRef(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || id == "." || id == ".." {
		return "", "", false
	}
	if p == "" {
		p = "/"
	}
	return id, p, true
}

package template

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
)

// imageDir is a directory the sandbox conventions require in an image
// template. force applies mode and owner even when the image already has the
// directory.
type imageDir struct {
	path     string
	mode     os.FileMode
	uid, gid int
	force    bool
}

// imageDirs lists the directories of the sandbox conventions, parents first.
func imageDirs() []imageDir {
	return []imageDir{
		{"workspace", 0o755, AgentUID, AgentGID, true},
		{"data", 0o755, AgentUID, AgentGID, true},
		{"home", 0o755, 0, 0, false},
		{"home/agent", 0o755, AgentUID, AgentGID, true},
		{"tmp", os.ModeSticky | 0o777, 0, 0, true},
		{"var", 0o755, 0, 0, false},
		{"var/log", 0o755, 0, 0, false},
		{"var/tmp", os.ModeSticky | 0o777, 0, 0, false},
		{"run", 0o755, 0, 0, false},
		{"proc", 0o555, 0, 0, false},
		{"sys", 0o555, 0, 0, false},
		{"dev", 0o755, 0, 0, false},
		{".stead", 0o755, 0, 0, false},
		{"etc", 0o755, 0, 0, false},
	}
}

// applyConventions makes an extracted image follow the sandbox conventions.
// The image is untrusted: every access goes through an os.Root, so a symlink
// planted by the image (say /home -> /root/.ssh or /etc/passwd -> /etc/shadow
// of the host) cannot redirect a write outside dst.
func applyConventions(dst string) error {
	r, err := os.OpenRoot(dst)
	if err != nil {
		return fmt.Errorf("open destination: %w", err)
	}
	defer r.Close()

	newHome := false
	for _, d := range imageDirs() {
		fi, err := r.Lstat(d.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := r.Mkdir(d.path, 0o700); err != nil {
				return fmt.Errorf("create /%s: %w", d.path, err)
			}
			if d.path == "home/agent" {
				newHome = true
			}
		case err != nil:
			return fmt.Errorf("stat /%s: %w", d.path, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			// Confined by r; the runtime resolves it inside the root too.
			slog.Warn("image template: convention directory is a symlink; left as is", "path", "/"+d.path)
			continue
		case !fi.IsDir():
			return fmt.Errorf("image has a %s at /%s, where a directory is required", fi.Mode().Type(), d.path)
		case !d.force:
			continue
		}
		if err := r.Lchown(d.path, d.uid, d.gid); err != nil {
			return fmt.Errorf("chown /%s: %w", d.path, err)
		}
		if err := r.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("chmod /%s: %w", d.path, err)
		}
	}
	if err := ensureAgentAccount(r); err != nil {
		return err
	}
	if newHome {
		if err := copyImageSkel(r); err != nil {
			return err
		}
	}
	return nil
}

// ensureAgentAccount appends the agent user and group to the image's
// /etc/passwd, /etc/group and (if present) /etc/shadow when missing,
// creating passwd and group when the image has none.
func ensureAgentAccount(r *os.Root) error {
	sh := "/bin/sh"
	if _, err := r.Stat("bin/bash"); err == nil {
		sh = "/bin/bash"
	}
	dbs := []struct {
		file, create, line string
		required           bool
	}{
		{"etc/passwd", minimalPasswd(sh), agentPasswdLine(sh), true},
		{"etc/group", minimalGroup, agentGroupLine, true},
		{"etc/shadow", "", agentShadowLine, false},
	}
	for _, db := range dbs {
		data, err := r.ReadFile(db.file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !db.required {
				continue
			}
			if err := r.WriteFile(db.file, []byte(db.create), 0o644); err != nil {
				return fmt.Errorf("create /%s: %w", db.file, err)
			}
			if err := r.Chmod(db.file, 0o644); err != nil {
				return fmt.Errorf("chmod /%s: %w", db.file, err)
			}
			continue
		case err != nil:
			return fmt.Errorf("read /%s: %w", db.file, err)
		}
		entries := parseDB(data)
		if hasName(entries, AgentUser) {
			continue
		}
		if db.file != "etc/shadow" {
			for _, e := range entries {
				if e.id == AgentUID {
					slog.Warn("image template: id 1000 already taken; adding agent with the same id",
						"file", "/"+db.file, "name", e.name)
				}
			}
		}
		// Rewrite whole (not O_APPEND) to fix a missing final newline; the
		// file keeps its inode, mode and owner.
		f, err := r.OpenFile(db.file, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return fmt.Errorf("open /%s: %w", db.file, err)
		}
		_, werr := f.Write(appendLine(data, db.line))
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return fmt.Errorf("write /%s: %w", db.file, err)
		}
	}
	return nil
}

// copyImageSkel copies the regular files at the top of the image's /etc/skel
// into a /home/agent that the conventions just created.
func copyImageSkel(r *os.Root) error {
	entries, err := fs.ReadDir(r.FS(), "etc/skel")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read /etc/skel: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src := path.Join("etc/skel", e.Name())
		data, err := r.ReadFile(src)
		if err != nil {
			return fmt.Errorf("read /%s: %w", src, err)
		}
		dst := path.Join("home/agent", e.Name())
		if err := r.WriteFile(dst, data, 0o644); err != nil {
			return fmt.Errorf("write /%s: %w", dst, err)
		}
		if err := r.Lchown(dst, AgentUID, AgentGID); err != nil {
			return fmt.Errorf("chown /%s: %w", dst, err)
		}
	}
	return nil
}

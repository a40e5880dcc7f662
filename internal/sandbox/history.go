package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/store"
)

// File history and single-path restore: the agent's undo for one file.
// Versions of a path are looked up in the sandbox's local snapshots (read
// through the confined files layer, so a symlink planted in a snapshot
// cannot lead outside it) and in its pushed snapshots (from the trees, no
// content is downloaded). File content is named by the repository's
// chunk digest when a repository is configured, so local and pushed
// versions compare; else by SHA-256.

// FileHistory lists the versions of one path across the sandbox's local
// and pushed snapshots, newest first.
func (s *Service) FileHistory(ctx context.Context, tenant, id, path string) ([]client.FileVersion, error) {
	p, err := files.CleanPath(path)
	if err != nil {
		return nil, err
	}
	sbID := id
	if sb, err := s.get(ctx, tenant, id); err == nil {
		sbID = sb.ID
	} else if !errors.Is(err, errs.ErrNotFound) {
		return nil, err
	}
	sc, _ := s.scope(ctx, tenant, false) // nil without a repository or pushes
	var out []client.FileVersion
	snaps, err := s.st.ListSnapshots(ctx, tenant, sbID)
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		v, ok, err := s.localVersion(sc, sn, p)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, v)
		}
	}
	if sc != nil {
		ms, err := sc.Snapshots(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if m.Source != "sandbox/"+sbID {
				continue
			}
			n, err := sc.Node(ctx, m.ID, p)
			if errors.Is(err, errs.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			v := client.FileVersion{Source: "remote", Snapshot: m.ID.String(), Time: m.Time, Type: n.Type,
				Size: n.Size, Mode: n.Mode, MTime: time.Unix(0, n.MtimeNs).UTC()}
			switch n.Type {
			case repo.TypeFile:
				v.Digest = repo.ContentDigest(n.Content)
			case repo.TypeDir:
				t, err := sc.Tree(ctx, *n.Subtree)
				if err != nil {
					return nil, err
				}
				var names []string
				for _, c := range t.Nodes {
					names = append(names, fmt.Sprintf("%s\x00%s\x00%d", c.Name, c.Type, c.Size))
				}
				v.Digest = listingDigest(names)
			case repo.TypeSymlink:
				v.Digest = "target:" + string(n.Target)
			}
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is in none of the sandbox's snapshots: %w", p, errs.ErrNotFound)
	}
	slices.SortStableFunc(out, func(a, b client.FileVersion) int { return b.Time.Compare(a.Time) })
	for i := range out {
		out[i].Changed = i == len(out)-1 || out[i].Digest != out[i+1].Digest || out[i].Type != out[i+1].Type
	}
	return out, nil
}

func listingDigest(lines []string) string {
	slices.Sort(lines)
	h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return "listing:" + hex.EncodeToString(h[:16])
}

// localVersion describes path p in a local snapshot.
func (s *Service) localVersion(sc *repo.Scope, sn store.Snapshot, p string) (client.FileVersion, bool, error) {
	root, err := files.OpenRoot(s.pool.Path(snapshotDataset(sn.ID)))
	if err != nil {
		return client.FileVersion{}, false, nil // dataset gone
	}
	defer root.Close()
	fi, err := root.Stat(p)
	if errors.Is(err, errs.ErrNotFound) {
		return client.FileVersion{}, false, nil
	}
	if err != nil {
		return client.FileVersion{}, false, err
	}
	v := client.FileVersion{Source: "local", Snapshot: sn.ID, Time: sn.CreatedAt, Type: string(fi.Type),
		Size: fi.Size, Mode: uint32(fi.Mode.Perm()), MTime: fi.ModTime.UTC()}
	switch fi.Type {
	case files.TypeFile:
		rc, _, err := root.ReadFile(p)
		if err != nil {
			return v, false, err
		}
		defer rc.Close()
		if f, ok := rc.(*os.File); ok && sc != nil {
			v.Digest, err = sc.FileDigest(f)
		} else {
			h := sha256.New()
			_, err = io.Copy(h, rc)
			v.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
		}
		if err != nil {
			return v, false, err
		}
	case files.TypeDir:
		list, err := root.List(p)
		if err != nil {
			return v, false, err
		}
		var names []string
		for _, c := range list {
			typ := string(c.Type)
			size := c.Size
			if c.Type != files.TypeFile {
				size = 0
			}
			if c.Type == files.TypeOther {
				typ = otherType(c.Mode)
			}
			names = append(names, fmt.Sprintf("%s\x00%s\x00%d", c.Name, typ, size))
		}
		v.Digest = listingDigest(names)
	case files.TypeSymlink:
		v.Digest = "target:" + fi.LinkTarget
	}
	v.Type = strings.Replace(v.Type, string(files.TypeOther), "other", 1)
	return v, true, nil
}

// otherType names a special file the way the repository's trees do.
func otherType(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return repo.TypeFifo
	case m&os.ModeSocket != 0:
		return repo.TypeSocket
	case m&os.ModeCharDevice != 0:
		return repo.TypeChar
	case m&os.ModeDevice != 0:
		return repo.TypeBlock
	}
	return "other"
}

// RestorePath brings back one path of a snapshot into the sandbox: it is
// written beside the destination under a temporary name, then swapped in
// atomically (renameat2 RENAME_EXCHANGE when something is there), and what
// it replaced is removed.
func (s *Service) RestorePath(ctx context.Context, tenant, id string, req client.RestorePathRequest) (client.Operation, error) {
	src, err := files.CleanPath(req.Path)
	if err != nil {
		return client.Operation{}, err
	}
	to := req.To
	if to == "" {
		to = src
	}
	if to, err = files.CleanPath(to); err != nil {
		return client.Operation{}, err
	}
	if to == "/" || src == "/" {
		return client.Operation{}, fmt.Errorf("restore-path: not the whole root (use rollback): %w", errs.ErrInvalid)
	}
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return client.Operation{}, err
	}
	if sb.State == store.StateArchived {
		return client.Operation{}, fmt.Errorf("sandbox %s is archived: start it first: %w", sb.Name, errs.ErrConflict)
	}
	var fill func(ctx context.Context, dirfd int, tmp string) error
	if strings.HasPrefix(req.Snapshot, snapshotPrefix) {
		sn, err := s.st.GetSnapshot(ctx, tenant, req.Snapshot)
		if err != nil {
			return client.Operation{}, fmt.Errorf("snapshot %s: %w", req.Snapshot, err)
		}
		fill = func(ctx context.Context, dirfd int, tmp string) error {
			return copyFromSnapshot(ctx, s.pool.Path(snapshotDataset(sn.ID)), src, dirfd, tmp)
		}
	} else {
		sc, err := s.scope(ctx, tenant, false)
		if err != nil {
			return client.Operation{}, err
		}
		m, err := sc.ResolveManifest(ctx, req.Snapshot)
		if err != nil {
			return client.Operation{}, err
		}
		if m.Source != "sandbox/"+sb.ID {
			s.log.Info("restoring a path from another sandbox's push", "sandbox", sb.ID, "source", m.Source)
		}
		fill = func(ctx context.Context, dirfd int, tmp string) error {
			_, err := sc.Restore(ctx, m.ID, fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, tmp), repo.RestoreOptions{Path: src})
			return err
		}
	}
	return s.startOp(ctx, tenant, "restore-path", sb.ID, req.Wait, func(ctx context.Context, op *operation) (any, error) {
		t0 := time.Now()
		root, err := files.OpenRoot(s.pool.Path(datasetName(sb.ID)))
		if err != nil {
			return nil, err
		}
		defer root.Close()
		pfd, name, err := root.OpenParent(to)
		if err != nil {
			return nil, err
		}
		defer unix.Close(pfd)
		var b [6]byte
		rand.Read(b[:])
		tmp := ".stead-restore-" + hex.EncodeToString(b[:])
		removeTmp := func() { root.Remove(path.Join(path.Dir(to), tmp), true) }
		op.phase("restore")
		if err := fill(ctx, pfd, tmp); err != nil {
			removeTmp()
			return nil, err
		}
		res := client.RestorePathResult{Path: to, From: req.Snapshot}
		err = unix.Renameat2(pfd, tmp, pfd, name, unix.RENAME_EXCHANGE)
		switch {
		case err == nil:
			res.Replaced = true
			removeTmp() // what was there before
		case errors.Is(err, unix.ENOENT):
			if err := unix.Renameat2(pfd, tmp, pfd, name, unix.RENAME_NOREPLACE); err != nil {
				removeTmp()
				return nil, fmt.Errorf("restore-path: put %s in place: %w", to, err)
			}
		default:
			removeTmp()
			return nil, fmt.Errorf("restore-path: swap %s: %w", to, err)
		}
		unix.Fsync(pfd)
		s.act.touch(sb.ID, s.now())
		res.Seconds = time.Since(t0).Seconds()
		return res, nil
	})
}

// copyFromSnapshot copies the entry at sandbox path p of a snapshot root to
// tmp inside dirfd with cp -a (reflinks where the pool can). Both ends are
// handed to cp as descriptors, so no path is resolved outside the roots.
func copyFromSnapshot(ctx context.Context, snapRoot, p string, dirfd int, tmp string) error {
	root, err := files.OpenRoot(snapRoot)
	if err != nil {
		return err
	}
	defer root.Close()
	sfd, sname, err := root.OpenParent(p)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, sname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s in the snapshot: %w", p, errs.ErrNotFound)
	}
	// cp gets its own copies of the descriptors (as fds 3 and 4).
	d1, err := unix.Dup(sfd)
	if err != nil {
		return err
	}
	srcDir := os.NewFile(uintptr(d1), "src")
	defer srcDir.Close()
	d2, err := unix.Dup(dirfd)
	if err != nil {
		return err
	}
	dstDir := os.NewFile(uintptr(d2), "dst")
	defer dstDir.Close()
	cmd := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", "/proc/self/fd/3/"+sname, "/proc/self/fd/4/"+tmp)
	cmd.ExtraFiles = []*os.File{srcDir, dstDir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s from the snapshot: %v: %s", p, err, strings.TrimSpace(string(out)))
	}
	return nil
}

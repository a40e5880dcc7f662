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
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
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
	agent := agentRequest(ctx)
	var out []client.FileVersion
	snaps, err := s.st.ListSnapshots(ctx, tenant, sbID)
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		var v client.FileVersion
		var ok bool
		// The agent sees what it could stat and read itself.
		err := s.asCaller(agent, func() (err error) { v, ok, err = s.localVersion(sc, sn, p); return err })
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
			if agent {
				if err := mayRead(ctx, sc, m.ID, p, agentUID, agentUID, false); err != nil {
					return nil, err
				}
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
// it replaced is removed. Everything is done on descriptors opened inside
// the sandbox's root and the snapshot's (files.Root.CopyTree; the
// repository's restorer), never by host path, so a sandbox swapping
// symlinks meanwhile cannot lead it out. Asked with a sandbox's own token,
// only that sandbox's snapshots and pushes are found, and the copy is made
// with the agent user's permissions (what it could not read or write
// itself is refused).
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
	agent := agentRequest(ctx)
	if sb.State == store.StateArchived {
		return client.Operation{}, fmt.Errorf("sandbox %s is archived: start it first: %w", sb.Name, errs.ErrConflict)
	}
	// One answer for an absent snapshot and for one the caller may not
	// see, whichever kind.
	notFound := fmt.Errorf("snapshot %s: %w", req.Snapshot, errs.ErrNotFound)
	var fill func(ctx context.Context, dirfd int, tmp string) error
	if strings.HasPrefix(req.Snapshot, snapshotPrefix) {
		sn, err := s.st.GetSnapshot(ctx, tenant, req.Snapshot)
		if errors.Is(err, errs.ErrNotFound) {
			return client.Operation{}, notFound
		}
		if err != nil {
			return client.Operation{}, fmt.Errorf("snapshot %s: %w", req.Snapshot, err)
		}
		// A sandbox's own snapshot, or a snapshot of a volume it mounts
		// for a path under that mount (read inside the mounted sub-path).
		srcPath, sub := src, ""
		switch {
		case sn.Kind == "volume":
			m, ok, err := s.mountOf(sb, sn.SandboxID, src)
			if err != nil {
				return client.Operation{}, err
			}
			if !ok {
				if agent {
					return client.Operation{}, notFound
				}
				return client.Operation{}, fmt.Errorf("snapshot %s is of volume %s, which sandbox %s does not mount at %s: %w", sn.ID, sn.SandboxName, sb.Name, src, errs.ErrInvalid)
			}
			if srcPath = strings.TrimPrefix(src, m.Path); srcPath == "" {
				srcPath = "/"
			}
			sub = m.SubPath
		case agent && sn.SandboxID != sb.ID:
			return client.Operation{}, notFound
		}
		fill = func(ctx context.Context, dirfd int, tmp string) error {
			root, err := s.datasetRoot(snapshotDataset(sn.ID), sub)
			if err != nil {
				return err
			}
			defer root.Close()
			return s.asCaller(agent, func() error { return root.CopyTree(ctx, srcPath, dirfd, tmp) })
		}
	} else {
		sc, err := s.scope(ctx, tenant, false)
		if err != nil {
			return client.Operation{}, err
		}
		m, err := sc.ResolveManifest(ctx, req.Snapshot)
		if errors.Is(err, errs.ErrNotFound) {
			return client.Operation{}, notFound
		}
		if err != nil {
			return client.Operation{}, err
		}
		if m.Source != "sandbox/"+sb.ID {
			if agent {
				return client.Operation{}, notFound
			}
			s.log.Info("restoring a path from another sandbox's push", "sandbox", sb.ID, "source", m.Source)
		}
		if agent {
			if err := mayRead(ctx, sc, m.ID, src, agentUID, agentUID, true); err != nil {
				return client.Operation{}, err
			}
		}
		fill = func(ctx context.Context, dirfd int, tmp string) error {
			// The restorer creates only below dirfd, never following a
			// symlink; the agent's copy is then handed to the agent.
			if _, err := sc.Restore(ctx, m.ID, fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, tmp), repo.RestoreOptions{Path: src}); err != nil {
				return err
			}
			if agent {
				return files.ChownTree(ctx, dirfd, tmp, agentUID, agentUID)
			}
			return nil
		}
	}
	v, _, err := s.fsFor(ctx, tenant, sb.ID, to, false, true)
	if err != nil {
		return client.Operation{}, err
	}
	return s.startOp(ctx, tenant, "restore-path", sb.ID, req.Wait, func(ctx context.Context, op *operation) (any, error) {
		defer v.close()
		t0 := time.Now()
		var pfd int
		var name string
		if err := s.asCaller(agent, func() (err error) { pfd, name, err = v.root.OpenParent(v.inner); return err }); err != nil {
			return nil, err
		}
		defer unix.Close(pfd)
		// A failed restore changes nothing: not even the parent's times,
		// which making and removing the temporary entry would move.
		times, timesErr := files.TimesOf(pfd)
		var b [6]byte
		rand.Read(b[:])
		tmp := ".stead-restore-" + hex.EncodeToString(b[:])
		removeTmp := func() {
			// As the caller, inside the parent's descriptor (wherever the
			// sandbox moved it meanwhile).
			s.asCaller(agent, func() error { return files.RemoveAt(pfd, tmp) })
		}
		fail := func(err error) (any, error) {
			removeTmp()
			if timesErr == nil {
				// As the daemon, on the descriptor: these are the times the
				// parent had before this operation touched it.
				if rerr := times.Restore(pfd); rerr != nil {
					s.log.Warn("restore-path: could not put back the parent's times", "sandbox", sb.ID, "path", to, "err", rerr)
				}
			}
			return nil, err
		}
		op.phase("restore")
		if err := fill(ctx, pfd, tmp); err != nil {
			return fail(err)
		}
		res := client.RestorePathResult{Path: to, From: req.Snapshot}
		err := s.asCaller(agent, func() error {
			err := unix.Renameat2(pfd, tmp, pfd, name, unix.RENAME_EXCHANGE)
			switch {
			case err == nil:
				res.Replaced = true
				return nil
			case errors.Is(err, unix.ENOENT):
				if err := unix.Renameat2(pfd, tmp, pfd, name, unix.RENAME_NOREPLACE); err != nil {
					return fmt.Errorf("restore-path: put %s in place: %w", to, err)
				}
				return nil
			}
			return fmt.Errorf("restore-path: swap %s: %w", to, err)
		})
		if err != nil {
			return fail(err) // the copy that could not be put in place
		}
		removeTmp() // what was there before
		unix.Fsync(pfd)
		s.act.touch(sb.ID, ActivityFiles, s.now())
		res.Seconds = time.Since(t0).Seconds()
		return res, nil
	})
}

// mountOf returns the mount of volume vol in sandbox sb under which the
// sandbox path p lies, if any.
func (s *Service) mountOf(sb store.Sandbox, vol, p string) (client.VolumeMount, bool, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return client.VolumeMount{}, false, err
	}
	for _, m := range sp.Volumes {
		if m.Volume == vol && (p == m.Path || strings.HasPrefix(p, m.Path+"/")) {
			return m, true, nil
		}
	}
	return client.VolumeMount{}, false, nil
}

// mayRead reports whether uid/gid could read path p of pushed snapshot id
// as the sandbox would let it: search permission on every directory above
// it and read permission on it; with deep, also on everything below (and
// search on every directory; device nodes it could not make). It answers
// errs.ErrForbidden naming the first path that fails.
func mayRead(ctx context.Context, sc *repo.Scope, id seal.ID, p string, uid, gid int, deep bool) error {
	dirs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := range dirs {
		above := "/" + strings.Join(dirs[:i], "/")
		n, err := sc.Node(ctx, id, above)
		if err != nil {
			return err
		}
		if !permits(n, uid, gid, 1) {
			return fmt.Errorf("%s: permission denied for uid %d: %w", above, uid, errs.ErrForbidden)
		}
	}
	n, err := sc.Node(ctx, id, p)
	if err != nil {
		return err
	}
	if !deep {
		if n.Type == repo.TypeSymlink || permits(n, uid, gid, 4) {
			return nil
		}
		return fmt.Errorf("%s: permission denied for uid %d: %w", p, uid, errs.ErrForbidden)
	}
	budget := 1_000_000
	var walk func(n *repo.Node, at string) error
	walk = func(n *repo.Node, at string) error {
		if budget--; budget < 0 {
			return fmt.Errorf("%s: more than a million entries to check: %w", p, errs.ErrInvalid)
		}
		switch n.Type {
		case repo.TypeSymlink, repo.TypeFifo, repo.TypeSocket:
			return nil
		case repo.TypeChar, repo.TypeBlock:
			return fmt.Errorf("%s: a device node: %w", at, errs.ErrForbidden)
		case repo.TypeDir:
			if !permits(n, uid, gid, 5) {
				return fmt.Errorf("%s: permission denied for uid %d: %w", at, uid, errs.ErrForbidden)
			}
			t, err := sc.Tree(ctx, *n.Subtree)
			if err != nil {
				return err
			}
			for i := range t.Nodes {
				if err := walk(&t.Nodes[i], path.Join(at, string(t.Nodes[i].Name))); err != nil {
					return err
				}
			}
			return nil
		}
		if !permits(n, uid, gid, 4) {
			return fmt.Errorf("%s: permission denied for uid %d: %w", at, uid, errs.ErrForbidden)
		}
		return nil
	}
	return walk(n, p)
}

// permits applies the owner/group/other permission bits of n for uid and
// gid (no supplementary groups) to want (4 read, 2 write, 1 search).
func permits(n *repo.Node, uid, gid int, want uint32) bool {
	m := n.Mode
	switch {
	case int(n.UID) == uid:
		m >>= 6
	case int(n.GID) == gid:
		m >>= 3
	}
	return m&want == want
}

// agentRequest reports whether ctx is a request made with a sandbox's own
// token (see api.Principal.Sandbox): such requests touch files with the
// agent user's permissions.
func agentRequest(ctx context.Context) bool {
	p, ok := api.PrincipalFromContext(ctx)
	return ok && p.Sandbox != ""
}

// asCaller runs fn as the agent user when agent is set (files.AsUser),
// else as the daemon.
func (s *Service) asCaller(agent bool, fn func() error) error {
	if agent {
		return files.AsUser(agentUID, agentUID, fn)
	}
	return fn()
}

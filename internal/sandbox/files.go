package sandbox

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/store"
)

// agentUID owns files written through the API unless they exist already.
const agentUID = 1000

// fsView is where one files call operates: the sandbox's root dataset, or
// a volume mounted in the sandbox when the path lies under its mount
// point, so the API sees what the sandbox's processes see.
type fsView struct {
	root  *files.Root
	inner string // the path within root
	// outerBase is where root appears in the sandbox ("" for its root).
	outerBase string
	readOnly  bool
}

func (v *fsView) close() { v.root.Close() }

// out maps a path within the root back to the sandbox's view.
func (v *fsView) out(p string) string {
	switch {
	case v.outerBase == "":
		return p
	case p == "/":
		return v.outerBase
	}
	return v.outerBase + p
}

func (v *fsView) info(fi files.FileInfo) client.FileInfo {
	fi.Path = v.out(fi.Path)
	return fileView(fi)
}

// fsFor opens the file system behind path in a sandbox; files work whether
// the sandbox runs or not, and on soft-deleted ones (their files stay until
// the purge). With touch, the call counts as activity for auto-stop (reading
// the agent log does not: a forgotten `attach` must not keep a sandbox
// awake). A write under a read-only volume mount is refused.
func (s *Service) fsFor(ctx context.Context, tenant, id, p string, touch, write bool) (*fsView, store.Sandbox, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return nil, sb, err
	}
	if err := s.mustHold(sb.ID, "read or write files of"); err != nil {
		return nil, sb, err
	}
	clean, err := files.CleanPath(p)
	if err != nil {
		return nil, sb, err
	}
	if touch && sb.State == store.StateRunning {
		s.act.touch(sb.ID, ActivityFiles, s.now())
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return nil, sb, err
	}
	mounts := append([]client.VolumeMount(nil), sp.Volumes...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Path) > len(mounts[j].Path) })
	for _, m := range mounts {
		if clean != m.Path && !strings.HasPrefix(clean, m.Path+"/") {
			continue
		}
		if write && m.ReadOnly {
			return nil, sb, fmt.Errorf("%s is on a volume mounted read-only: %w", clean, errs.ErrForbidden)
		}
		r, err := s.volumeRoot(m)
		if err != nil {
			return nil, sb, err
		}
		inner := strings.TrimPrefix(clean, m.Path)
		if inner == "" {
			inner = "/"
		}
		return &fsView{root: r, inner: inner, outerBase: m.Path, readOnly: m.ReadOnly}, sb, nil
	}
	r, err := files.OpenRoot(s.pool.Path(datasetName(sb.ID)))
	if err != nil {
		return nil, sb, err
	}
	return &fsView{root: r, inner: clean}, sb, nil
}

// volumeRoot opens what a volume mount shows as a root of its own: the
// volume's dataset, or its sub-path (resolved without following symlinks,
// as the bind mount is made), so a symlink planted in a mounted sub-path
// resolves inside that sub-path, never in a sibling's.
func (s *Service) volumeRoot(m client.VolumeMount) (*files.Root, error) {
	r, err := s.datasetRoot(volumeDataset(m.Volume), m.SubPath)
	if err != nil {
		return nil, fmt.Errorf("volume %s sub-path %s: %w", m.Volume, m.SubPath, err)
	}
	return r, nil
}

// datasetRoot opens a dataset of the pool as a root, or its sub-directory
// sub (a volume's mounted sub-path) as a root of its own.
func (s *Service) datasetRoot(dataset, sub string) (*files.Root, error) {
	r, err := files.OpenRoot(s.pool.Path(dataset))
	if err != nil || sub == "" {
		return r, err
	}
	defer r.Close()
	return r.OpenSubRoot("/" + sub)
}

func fileView(fi files.FileInfo) client.FileInfo {
	return client.FileInfo{
		Name: fi.Name, Path: fi.Path, Type: string(fi.Type), Size: fi.Size,
		Mode: uint32(fi.Mode.Perm()) | setBits(fi.Mode), UID: fi.UID, GID: fi.GID,
		ModTime: fi.ModTime, Target: fi.LinkTarget,
	}
}

func setBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// closingReader closes the root with the file.
type closingReader struct {
	io.ReadCloser
	root *files.Root
}

func (c closingReader) Close() error {
	err := c.ReadCloser.Close()
	c.root.Close()
	return err
}

// ReadFile opens a file in a sandbox.
func (s *Service) ReadFile(ctx context.Context, tenant, id, path string) (io.ReadCloser, client.FileInfo, error) {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, false)
	if err != nil {
		return nil, client.FileInfo{}, err
	}
	rc, fi, err := v.root.ReadFile(v.inner)
	if err != nil {
		v.close()
		return nil, client.FileInfo{}, err
	}
	return closingReader{rc, v.root}, v.info(fi), nil
}

// WriteFile writes a file atomically (owned by the agent user).
func (s *Service) WriteFile(ctx context.Context, tenant, id, path string, mode uint32, body io.Reader) (client.FileInfo, error) {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, true)
	if err != nil {
		return client.FileInfo{}, err
	}
	defer v.close()
	if mode == 0 {
		mode = 0o644
	}
	if err := v.root.WriteFile(ctx, v.inner, fs.FileMode(mode&0o777), agentUID, agentUID, body); err != nil {
		return client.FileInfo{}, err
	}
	fi, err := v.root.Stat(v.inner)
	if err != nil {
		return client.FileInfo{}, err
	}
	return v.info(fi), nil
}

// StatFile describes one path (symlinks are not followed).
func (s *Service) StatFile(ctx context.Context, tenant, id, path string) (client.FileInfo, error) {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, false)
	if err != nil {
		return client.FileInfo{}, err
	}
	defer v.close()
	fi, err := v.root.Stat(v.inner)
	if err != nil {
		return client.FileInfo{}, err
	}
	return v.info(fi), nil
}

// ListFiles lists a directory.
func (s *Service) ListFiles(ctx context.Context, tenant, id, path string) ([]client.FileInfo, error) {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, false)
	if err != nil {
		return nil, err
	}
	defer v.close()
	list, err := v.root.List(v.inner)
	if err != nil {
		return nil, err
	}
	out := make([]client.FileInfo, 0, len(list))
	for _, fi := range list {
		out = append(out, v.info(fi))
	}
	return out, nil
}

// Mkdir makes a directory (owned by the agent user).
func (s *Service) Mkdir(ctx context.Context, tenant, id, path string, parents bool) error {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, true)
	if err != nil {
		return err
	}
	defer v.close()
	return v.root.Mkdir(v.inner, parents, agentUID, agentUID)
}

// RemoveFile removes a path; recursive removal never follows symlinks.
func (s *Service) RemoveFile(ctx context.Context, tenant, id, path string, recursive bool) error {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, true)
	if err != nil {
		return err
	}
	defer v.close()
	return v.root.Remove(v.inner, recursive)
}

// RenameFile renames within the sandbox's root or within one volume.
func (s *Service) RenameFile(ctx context.Context, tenant, id, from, to string) error {
	vf, _, err := s.fsFor(ctx, tenant, id, from, true, true)
	if err != nil {
		return err
	}
	defer vf.close()
	vt, _, err := s.fsFor(ctx, tenant, id, to, true, true)
	if err != nil {
		return err
	}
	defer vt.close()
	if vf.root.Path() != vt.root.Path() {
		return fmt.Errorf("rename %s to %s: they are on different file systems (a volume and the root, or two volumes); copy instead: %w", from, to, errs.ErrInvalid)
	}
	return vf.root.Rename(vf.inner, vt.inner)
}

// DownloadTar writes a tar of path (volumes mounted below path are not
// included; download them by their own mount paths).
func (s *Service) DownloadTar(ctx context.Context, tenant, id, path string, w io.Writer) error {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, false)
	if err != nil {
		return err
	}
	defer v.close()
	return v.root.WriteTar(ctx, v.inner, w)
}

// UploadTar extracts a tar under path; entries become the agent user's.
func (s *Service) UploadTar(ctx context.Context, tenant, id, path string, body io.Reader) error {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, true)
	if err != nil {
		return err
	}
	defer v.close()
	if err := v.root.Mkdir(v.inner, true, agentUID, agentUID); err != nil {
		if _, serr := v.root.Stat(v.inner); serr != nil {
			return err
		}
	}
	return v.root.ExtractTar(ctx, v.inner, body, files.ExtractOptions{UID: agentUID, GID: agentUID})
}

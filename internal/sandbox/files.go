package sandbox

import (
	"context"
	"io"
	"io/fs"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/files"
	"github.com/stead-dev/stead/internal/store"
)

// agentUID owns files written through the API unless they exist already.
const agentUID = 1000

// root opens the sandbox's root for a files call; files work whether the
// sandbox runs or not, and on soft-deleted ones (their files stay until
// the purge). The call counts as activity for auto-stop.
func (s *Service) root(ctx context.Context, tenant, id string) (*files.Root, store.Sandbox, error) {
	return s.openRoot(ctx, tenant, id, true)
}

// openRoot opens a sandbox's root; touch says whether the call counts as
// activity (reading the agent log does not: a forgotten `attach` must not
// keep a sandbox awake).
func (s *Service) openRoot(ctx context.Context, tenant, id string, touch bool) (*files.Root, store.Sandbox, error) {
	sb, err := s.get(ctx, tenant, id)
	if err != nil {
		return nil, sb, err
	}
	if touch && sb.State == store.StateRunning {
		s.act.touch(sb.ID, s.now())
	}
	r, err := files.OpenRoot(s.pool.Path(datasetName(sb.ID)))
	if err != nil {
		return nil, sb, err
	}
	return r, sb, nil
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
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return nil, client.FileInfo{}, err
	}
	rc, fi, err := r.ReadFile(path)
	if err != nil {
		r.Close()
		return nil, client.FileInfo{}, err
	}
	return closingReader{rc, r}, fileView(fi), nil
}

// WriteFile writes a file atomically (owned by the agent user).
func (s *Service) WriteFile(ctx context.Context, tenant, id, path string, mode uint32, body io.Reader) (client.FileInfo, error) {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return client.FileInfo{}, err
	}
	defer r.Close()
	if mode == 0 {
		mode = 0o644
	}
	if err := r.WriteFile(ctx, path, fs.FileMode(mode&0o777), agentUID, agentUID, body); err != nil {
		return client.FileInfo{}, err
	}
	fi, err := r.Stat(path)
	if err != nil {
		return client.FileInfo{}, err
	}
	return fileView(fi), nil
}

// StatFile describes one path (symlinks are not followed).
func (s *Service) StatFile(ctx context.Context, tenant, id, path string) (client.FileInfo, error) {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return client.FileInfo{}, err
	}
	defer r.Close()
	fi, err := r.Stat(path)
	if err != nil {
		return client.FileInfo{}, err
	}
	return fileView(fi), nil
}

// ListFiles lists a directory.
func (s *Service) ListFiles(ctx context.Context, tenant, id, path string) ([]client.FileInfo, error) {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	list, err := r.List(path)
	if err != nil {
		return nil, err
	}
	out := make([]client.FileInfo, 0, len(list))
	for _, fi := range list {
		out = append(out, fileView(fi))
	}
	return out, nil
}

// Mkdir makes a directory (owned by the agent user).
func (s *Service) Mkdir(ctx context.Context, tenant, id, path string, parents bool) error {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Mkdir(path, parents, agentUID, agentUID)
}

// RemoveFile removes a path; recursive removal never follows symlinks.
func (s *Service) RemoveFile(ctx context.Context, tenant, id, path string, recursive bool) error {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Remove(path, recursive)
}

// RenameFile renames within the sandbox.
func (s *Service) RenameFile(ctx context.Context, tenant, id, from, to string) error {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Rename(from, to)
}

// DownloadTar writes a tar of path.
func (s *Service) DownloadTar(ctx context.Context, tenant, id, path string, w io.Writer) error {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.WriteTar(ctx, path, w)
}

// UploadTar extracts a tar under path; entries become the agent user's.
func (s *Service) UploadTar(ctx context.Context, tenant, id, path string, body io.Reader) error {
	r, _, err := s.root(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Mkdir(path, true, agentUID, agentUID); err != nil {
		if _, serr := r.Stat(path); serr != nil {
			return err
		}
	}
	return r.ExtractTar(ctx, path, body, files.ExtractOptions{UID: agentUID, GID: agentUID})
}

package sandbox

import (
	"context"

	"github.com/stead-dev/stead/internal/files"
)

// WatchDir starts watching the directory at path in a sandbox (on its
// root or on the volume mounted there) for changes; with recursive, its
// subdirectories too. The path is resolved as the file API resolves
// paths, inside the sandbox's root; see files.Watcher for how the watch
// stays inside it. The caller closes the watcher.
func (s *Service) WatchDir(ctx context.Context, tenant, id, path string, recursive bool) (*files.Watcher, error) {
	v, _, err := s.fsFor(ctx, tenant, id, path, true, false)
	if err != nil {
		return nil, err
	}
	defer v.close()
	return v.root.Watch(v.inner, recursive)
}

package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Node types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeFifo    = "fifo"
	TypeChar    = "chardev"
	TypeBlock   = "blockdev"
	TypeSocket  = "socket"
)

// maxDepth bounds directory nesting in a tree read from a repository.
const maxDepth = 1024

// Xattr is one extended attribute.
type Xattr struct {
	Name  string `json:"n"`
	Value []byte `json:"v"`
}

// Extent is a data region [Off, Off+Len) of a sparse file.
type Extent struct {
	Off int64 `json:"o"`
	Len int64 `json:"l"`
}

// Node is one directory entry in a tree blob.
type Node struct {
	// Name is the entry's name: raw bytes, so non-UTF-8 names survive.
	Name []byte `json:"name"`
	Type string `json:"type"`
	// Mode holds the permission bits plus setuid, setgid and sticky.
	Mode    uint32 `json:"mode"`
	UID     uint32 `json:"uid"`
	GID     uint32 `json:"gid"`
	Size    int64  `json:"size,omitempty"`
	MtimeNs int64  `json:"mtime"`
	// CtimeNs and Inode are recorded so the next push can skip unchanged
	// files; Links > 1 with the same Inode marks hardlinks.
	CtimeNs int64   `json:"ctime,omitempty"`
	Inode   uint64  `json:"ino,omitempty"`
	Links   uint32  `json:"links,omitempty"`
	Target  []byte  `json:"target,omitempty"`
	Rdev    uint64  `json:"rdev,omitempty"`
	Xattrs  []Xattr `json:"xattrs,omitempty"`
	// Sparse marks a file with holes: Extents are its data regions
	// (possibly none). Otherwise one region covers Size. Content chunks
	// cover the concatenation of the data regions.
	Sparse  bool      `json:"sparse,omitempty"`
	Extents []Extent  `json:"extents,omitempty"`
	Content []seal.ID `json:"content,omitempty"`
	Subtree *seal.ID  `json:"subtree,omitempty"`
}

// Tree is a directory's entries, sorted by name.
type Tree struct {
	Nodes []Node `json:"nodes"`
}

// dataLen is the number of data bytes a file node holds.
func (n *Node) dataLen() int64 {
	if !n.Sparse {
		return n.Size
	}
	var t int64
	for _, e := range n.Extents {
		t += e.Len
	}
	return t
}

// validName reports whether b may name a directory entry created by restore.
func validName(b []byte) bool {
	return len(b) > 0 && len(b) <= 255 && !bytes.ContainsAny(b, "/\x00") &&
		!bytes.Equal(b, []byte(".")) && !bytes.Equal(b, []byte(".."))
}

// validate checks a tree read from a repository: every name is one safe
// path component, names are strictly sorted (so unique), types are known,
// sizes and extents are sane. A tree that fails is refused whole.
func (t *Tree) validate() error {
	for i := range t.Nodes {
		n := &t.Nodes[i]
		if !validName(n.Name) {
			return fmt.Errorf("entry name %q: %w", n.Name, pack.ErrCorrupt)
		}
		if i > 0 && bytes.Compare(t.Nodes[i-1].Name, n.Name) >= 0 {
			return fmt.Errorf("entry %q: names not sorted or not unique: %w", n.Name, pack.ErrCorrupt)
		}
		if n.Mode&^0o7777 != 0 {
			return fmt.Errorf("entry %q: mode %o: %w", n.Name, n.Mode, pack.ErrCorrupt)
		}
		switch n.Type {
		case TypeDir:
			if n.Subtree == nil || len(n.Content) > 0 {
				return fmt.Errorf("directory %q: %w", n.Name, pack.ErrCorrupt)
			}
		case TypeFile:
			if n.Subtree != nil || n.Size < 0 || n.Size > 1<<50 {
				return fmt.Errorf("file %q: %w", n.Name, pack.ErrCorrupt)
			}
			if !n.Sparse && len(n.Extents) > 0 {
				return fmt.Errorf("file %q: extents on a dense file: %w", n.Name, pack.ErrCorrupt)
			}
			var end int64
			for _, e := range n.Extents {
				if e.Off < end || e.Len <= 0 || e.Off+e.Len > n.Size || e.Off+e.Len < e.Off {
					return fmt.Errorf("file %q: bad extent: %w", n.Name, pack.ErrCorrupt)
				}
				end = e.Off + e.Len
			}
		case TypeSymlink:
			if len(n.Target) == 0 || len(n.Target) > 4096 || bytes.IndexByte(n.Target, 0) >= 0 {
				return fmt.Errorf("symlink %q: %w", n.Name, pack.ErrCorrupt)
			}
		case TypeFifo, TypeChar, TypeBlock, TypeSocket:
		default:
			return fmt.Errorf("entry %q: type %q: %w", n.Name, n.Type, pack.ErrCorrupt)
		}
		if n.Type != TypeFile && (len(n.Content) > 0 || len(n.Extents) > 0 || n.Sparse) {
			return fmt.Errorf("entry %q: content on a %s: %w", n.Name, n.Type, pack.ErrCorrupt)
		}
		if n.Type != TypeDir && n.Subtree != nil {
			return fmt.Errorf("entry %q: subtree on a %s: %w", n.Name, n.Type, pack.ErrCorrupt)
		}
	}
	return nil
}

// encodeTree serialises a tree deterministically (the same tree always
// encodes to the same bytes, hence the same id).
func encodeTree(t *Tree) ([]byte, error) {
	return json.Marshal(t)
}

// loadTree reads, authenticates and validates a tree blob, through the
// local cache of tree blobs.
func (s *Scope) loadTree(ctx context.Context, id seal.ID) (*Tree, error) {
	var path string
	var data []byte
	if s.r.opts.CacheDir != "" {
		path = filepath.Join(s.r.cacheDir(s.name), "trees", id.String())
		if b, err := os.ReadFile(path); err == nil && s.codec.Sealer().ID(b) == id {
			data = b
		}
	}
	if data == nil {
		b, err := s.loadBlob(ctx, pack.TreeBlob, id, nil)
		if err != nil {
			return nil, fmt.Errorf("load tree %s: %w", id, err)
		}
		data = b
		s.cacheTree(path, data)
	}
	t, err := decodeTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	return t, nil
}

// decodeTree decodes and validates a tree blob's plaintext.
func decodeTree(data []byte) (*Tree, error) {
	var t Tree
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("decode tree: %w: %w", pack.ErrCorrupt, err)
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// cacheTree keeps a tree blob's plaintext in the local cache (best effort:
// a lost cache entry is fetched again; it is verified by its keyed id on
// every read). Not fsynced: the cache is disposable.
func (s *Scope) cacheTree(path string, data []byte) {
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err == nil {
		_ = os.Rename(tmp, path)
	}
}

// treeCachePath returns where tree id is cached ("" without a cache).
func (s *Scope) treeCachePath(id seal.ID) string {
	if s.r.opts.CacheDir == "" {
		return ""
	}
	return filepath.Join(s.r.cacheDir(s.name), "trees", id.String())
}

// findNode returns the node at a slash-separated path below root ("" or
// "/" returns a synthetic directory node for the root itself).
func (s *Scope) findNode(ctx context.Context, root seal.ID, path string) (*Node, error) {
	cur := &Node{Name: []byte("/"), Type: TypeDir, Mode: 0o755, Subtree: &root}
	for _, comp := range splitPath(path) {
		if cur.Type != TypeDir {
			return nil, fmt.Errorf("path %q: %q is not a directory: %w", path, cur.Name, errNotInSnapshot)
		}
		t, err := s.loadTree(ctx, *cur.Subtree)
		if err != nil {
			return nil, err
		}
		i, ok := slices.BinarySearchFunc(t.Nodes, []byte(comp), func(n Node, name []byte) int { return bytes.Compare(n.Name, name) })
		if !ok {
			return nil, fmt.Errorf("path %q: %w", path, errNotInSnapshot)
		}
		cur = &t.Nodes[i]
	}
	return cur, nil
}

// Tree reads one directory tree blob of the scope (authenticated and validated).
func (s *Scope) Tree(ctx context.Context, id seal.ID) (*Tree, error) {
	if err := s.ensureIndex(ctx); err != nil {
		return nil, err
	}
	return s.loadTree(ctx, id)
}

package repo

// Hostile trees: snapshots crafted by someone holding the scope's key (or a
// bug) whose trees try to make a restore write outside its target. They
// are sealed with the scope's own codec, so they pass authentication and
// only the tree validation and the restorer's confinement stand in the way.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/repo/pack"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// hostileKey returns the fixed data key of the hostile scope, so blob ids
// are the same in every run (fuzz corpora stay meaningful).
func hostileKey() seal.Key { return seal.Key{0: 's', 1: 't', 2: 'e', 3: 'a', 4: 'd', 31: 1} }

// hostileRig is a repository on a local store, a scope with a fixed data
// key and a sandbox directory holding the restore target and a sentinel
// directory next to it that nothing may touch.
type hostileRig struct {
	t       testing.TB
	s       *Scope
	sandbox string
	outside string // sentinel directory beside the restore targets
	secret  string // a file in outside
	n       int
}

// hostileTmp returns a fresh directory on /dev/shm when it is a tmpfs (the
// restore's syncfs is free there), else in the test's temp dir.
func hostileTmp(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		if dir, err := os.MkdirTemp("/dev/shm", "stead-repo-hostile-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

func newHostileRig(t testing.TB) *hostileRig {
	t.Helper()
	ctx := context.Background()
	base := hostileTmp(t)
	store, master := newLocalRepo(t, filepath.Join(base, "repo"))
	wrapped, err := seal.Wrap(master, "t-hostile", hostileKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, keyKey("t-hostile"), wrapped); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, store, master, Options{Workers: 2, Transfers: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Scope(ctx, "t-hostile", false)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileRig{t: t, s: s, sandbox: filepath.Join(base, "sandbox")}
	h.outside = filepath.Join(h.sandbox, "outside")
	h.secret = filepath.Join(h.outside, "secret")
	if err := os.MkdirAll(h.outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.secret, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1_000_000_000, 0)
	for _, p := range []string{h.secret, h.outside} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// hBlob is a plaintext blob to store.
type hBlob struct {
	t    pack.BlobType
	data []byte
}

// store seals blobs into one new pack and index file, as a push would, and
// returns the pack and index keys and the blobs' ids.
func (h *hostileRig) store(blobs ...hBlob) (keys []string, ids []seal.ID) {
	h.t.Helper()
	ctx := context.Background()
	w := pack.NewWriter(h.s.codec)
	seen := map[seal.ID]bool{}
	for _, b := range blobs {
		id := h.s.codec.Sealer().ID(b.data)
		ids = append(ids, id)
		if seen[id] {
			continue
		}
		seen[id] = true
		stored, compressed := h.s.codec.Encode(nil, b.t, id, b.data)
		w.Add(b.t, id, stored, len(b.data), compressed)
	}
	data, pid, bl, err := w.Finish()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.s.r.store.Put(ctx, packKey(h.s.name, pid), data); err != nil {
		h.t.Fatal(err)
	}
	f := pack.IndexFile{Packs: []pack.IndexPack{{ID: pid, Size: int64(len(data)), Blobs: bl}}}
	idx, err := pack.EncodeIndex(h.s.codec, f)
	if err != nil {
		h.t.Fatal(err)
	}
	iid := seal.Hash(idx)
	if err := h.s.r.store.Put(ctx, indexKey(h.s.name, iid), idx); err != nil {
		h.t.Fatal(err)
	}
	h.s.addIndex(iid, f)
	return []string{packKey(h.s.name, pid), indexKey(h.s.name, iid)}, ids
}

// data stores a data chunk and returns its id.
func (h *hostileRig) data(b []byte) seal.ID {
	h.t.Helper()
	_, ids := h.store(hBlob{pack.DataBlob, b})
	return ids[0]
}

// tree stores a tree blob, encoded as a push encodes it but without
// validation, and returns its id.
func (h *hostileRig) tree(nodes ...Node) seal.ID {
	h.t.Helper()
	b, err := encodeTree(&Tree{Nodes: nodes})
	if err != nil {
		h.t.Fatal(err)
	}
	_, ids := h.store(hBlob{pack.TreeBlob, b})
	return ids[0]
}

// manifest stores a manifest whose root directory is the tree root.
func (h *hostileRig) manifest(root seal.ID) *Manifest {
	h.t.Helper()
	m := &Manifest{Scope: h.s.name, Time: time.Now().UTC(), Tree: root, Source: "hostile",
		Root: Node{Name: []byte("/"), Type: TypeDir, Mode: 0o755, Subtree: &root}}
	if err := h.s.writeManifest(context.Background(), m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// restore restores m (or path of it) into a fresh target in the sandbox.
func (h *hostileRig) restore(m *Manifest, path string) (string, error) {
	h.t.Helper()
	h.n++
	dst := filepath.Join(h.sandbox, fmt.Sprintf("dst%d", h.n))
	_, err := h.s.Restore(context.Background(), m.ID, dst, RestoreOptions{Path: path})
	return dst, err
}

// assertConfined checks that the sandbox holds nothing but the restore
// targets and the untouched sentinel directory.
func (h *hostileRig) assertConfined() {
	h.t.Helper()
	ents, err := os.ReadDir(h.sandbox)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "outside" && !strings.HasPrefix(e.Name(), "dst") {
			h.t.Fatalf("restore created %s beside its target", e.Name())
		}
	}
	ents, err = os.ReadDir(h.outside)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "secret" {
		h.t.Fatalf("the sentinel directory changed: %v", ents)
	}
	var st unix.Stat_t
	if err := unix.Lstat(h.secret, &st); err != nil {
		h.t.Fatal(err)
	}
	got, err := os.ReadFile(h.secret)
	if err != nil {
		h.t.Fatal(err)
	}
	if string(got) != "untouched" || st.Nlink != 1 || st.Mode&0o7777 != 0o644 || st.Uid != 0 || st.Mtim.Sec != 1_000_000_000 {
		h.t.Fatalf("the sentinel file changed: %q nlink %d mode %o uid %d mtime %d", got, st.Nlink, st.Mode&0o7777, st.Uid, st.Mtim.Sec)
	}
	if x, _ := unix.Llistxattr(h.secret, make([]byte, 1024)); x != 0 {
		h.t.Fatal("the sentinel file got extended attributes")
	}
	var ost unix.Stat_t
	if err := unix.Lstat(h.outside, &ost); err != nil {
		h.t.Fatal(err)
	}
	if ost.Mtim.Sec != 1_000_000_000 || ost.Mode&0o7777 != 0o755 {
		h.t.Fatalf("the sentinel directory's metadata changed: mode %o mtime %d", ost.Mode&0o7777, ost.Mtim.Sec)
	}
}

func hFile(name string, content ...seal.ID) Node {
	return Node{Name: []byte(name), Type: TypeFile, Mode: 0o644, Size: int64(5 * len(content)), Content: content}
}

func hDir(name string, sub seal.ID) Node {
	return Node{Name: []byte(name), Type: TypeDir, Mode: 0o755, Subtree: &sub}
}

func hSymlink(name, target string) Node {
	return Node{Name: []byte(name), Type: TypeSymlink, Mode: 0o777, Target: []byte(target)}
}

// TestRestoreRefusesHostileTrees restores snapshots whose trees carry
// names that are not one safe path component, duplicate or unsorted
// names, a symlink and a directory under one name, and inconsistent file
// entries. Each restore fails with an error wrapping pack.ErrCorrupt and
// nothing appears outside the restore target.
func TestRestoreRefusesHostileTrees(t *testing.T) {
	h := newHostileRig(t)
	hello := h.data([]byte("hello"))
	evil := h.tree(hFile("evil", hello))
	treeChunk := h.tree(hFile("x", hello)) // a tree blob, named as file content below
	cases := []struct {
		name  string
		nodes []Node
	}{
		{"dot-dot", []Node{hFile("..", hello)}},
		{"dot-dot-dir", []Node{hDir("..", evil)}},
		{"dot", []Node{hDir(".", evil)}},
		{"empty-name", []Node{hFile("", hello)}},
		{"slash-inside", []Node{hFile("a/b", hello)}},
		{"dot-dot-path", []Node{hFile("../outside/evil", hello)}},
		{"absolute", []Node{hFile("/abs", hello)}},
		{"absolute-to-sentinel", []Node{hFile(h.secret, hello)}},
		{"nul-byte", []Node{hFile("a\x00b", hello)}},
		{"name-too-long", []Node{hFile(strings.Repeat("n", 256), hello)}},
		{"duplicate-files", []Node{hFile("a", hello), hFile("a", hello)}},
		{"unsorted", []Node{hFile("b", hello), hFile("a", hello)}},
		{"symlink-then-dir-same-name", []Node{hSymlink("X", h.outside), hDir("X", evil)}},
		{"dir-then-symlink-same-name", []Node{hDir("X", evil), hSymlink("X", h.outside)}},
		{"symlink-then-file-same-name", []Node{hSymlink("X", h.secret), hFile("X", hello)}},
		{"dir-without-subtree", []Node{{Name: []byte("d"), Type: TypeDir, Mode: 0o755}}},
		{"unknown-type", []Node{{Name: []byte("u"), Type: "door", Mode: 0o644}}},
		{"mode-beyond-permissions", []Node{{Name: []byte("m"), Type: TypeFile, Mode: 0o170644}}},
		{"symlink-with-content", []Node{{Name: []byte("l"), Type: TypeSymlink, Target: []byte("x"), Content: []seal.ID{hello}}}},
		{"symlink-empty-target", []Node{{Name: []byte("l"), Type: TypeSymlink}}},
		{"file-with-subtree", []Node{{Name: []byte("f"), Type: TypeFile, Subtree: &evil}}},
		{"file-longer-than-its-chunks", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: 6, Content: []seal.ID{hello}}}},
		{"file-shorter-than-its-chunks", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: 4, Content: []seal.ID{hello}}}},
		{"file-content-is-a-tree", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: 5, Content: []seal.ID{treeChunk}}}},
		{"file-chunk-not-indexed", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: 5, Content: []seal.ID{{1, 2, 3}}}}},
		{"extent-past-end", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: 5, Sparse: true,
			Extents: []Extent{{Off: 3, Len: 5}}, Content: []seal.ID{hello}}}},
		{"extents-overlap", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: 20, Sparse: true,
			Extents: []Extent{{Off: 0, Len: 3}, {Off: 2, Len: 2}}, Content: []seal.ID{hello}}}},
		{"negative-size", []Node{{Name: []byte("f"), Type: TypeFile, Mode: 0o644, Size: -1}}},
	}
	for _, c := range cases {
		root := h.tree(c.nodes...)
		// The hostile tree as the root and one level down, below a
		// valid entry that is restored first.
		for _, m := range []*Manifest{h.manifest(root), h.manifest(h.tree(hFile("a-first", hello), hDir("b", root)))} {
			dst, err := h.restore(m, "")
			if err == nil {
				t.Errorf("%s: restore succeeded", c.name)
			} else if !errors.Is(err, pack.ErrCorrupt) {
				t.Errorf("%s: error %v does not wrap pack.ErrCorrupt", c.name, err)
			}
			h.assertConfined()
			// Entries may be created inside the target before the
			// restore fails, but only under names that are one safe
			// component.
			allowed := []string{"a-first", "b"}
			for _, n := range c.nodes {
				if validName(n.Name) {
					allowed = append(allowed, string(n.Name), "b/"+string(n.Name))
				}
			}
			assertOnlyBelow(t, dst, allowed...)
		}
	}
}

// assertOnlyBelow checks that dst holds no entry but the allowed relative
// paths.
func assertOnlyBelow(t *testing.T, dst string, allowed ...string) {
	t.Helper()
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dst && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		if rel != "." && !slices.Contains(allowed, rel) {
			return fmt.Errorf("unexpected entry %s in %s", rel, dst)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRestoreNeverFollowsSymlinks restores symlinks pointing outside the
// target (absolute, relative with "..", at the sentinel file), one with
// extended attributes, and asks for paths through them: the links are
// created as links, nothing is written through them, and a path through a
// link or with ".." is refused.
func TestRestoreNeverFollowsSymlinks(t *testing.T) {
	h := newHostileRig(t)
	hello := h.data([]byte("hello"))
	evil := h.tree(hFile("evil", hello))
	root := h.tree(
		hSymlink("abs", h.outside),
		hDir("d", evil),
		hSymlink("rel", "../outside"),
		hSymlink("to-secret", h.secret),
	)
	m := h.manifest(root)
	dst, err := h.restore(m, "")
	if err != nil {
		t.Fatal(err)
	}
	h.assertConfined()
	for name, want := range map[string]string{"abs": h.outside, "rel": "../outside", "to-secret": h.secret} {
		got, err := os.Readlink(filepath.Join(dst, name))
		if err != nil || got != want {
			t.Fatalf("%s: readlink %q, %v; want %q", name, got, err, want)
		}
	}
	// Paths through a symlink or with "..": refused, nothing written.
	for _, p := range []string{"abs/evil", "rel/secret", "to-secret/x", "../outside/secret", "d/../../outside", "/../d"} {
		if _, err := h.restore(m, p); err == nil {
			t.Errorf("restore of path %q succeeded", p)
		}
		h.assertConfined()
	}
	// Metadata of a symlink applies to the link, not its target.
	link := hSymlink("to-secret", h.secret)
	link.Mode, link.UID, link.GID, link.MtimeNs = 0o777, 1234, 1234, 42
	link.Xattrs = []Xattr{{Name: "trusted.stead-test", Value: []byte("evil")}}
	dst, err = h.restore(h.manifest(h.tree(link)), "")
	if err == nil {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, "to-secret"), &st); err != nil || st.Uid != 1234 {
			t.Fatalf("symlink owner not applied to the link: %v uid %d", err, st.Uid)
		}
	}
	h.assertConfined()
}

// TestRestoreHardlinksStayInsideTarget restores file nodes that claim to
// be hardlinks (Links > 1) of an inode number, one of them the inode of
// a file outside the target: the first name of an inode is a new file,
// later names link to it inside the target, and the outside file is never
// linked.
func TestRestoreHardlinksStayInsideTarget(t *testing.T) {
	h := newHostileRig(t)
	hello := h.data([]byte("hello"))
	var st unix.Stat_t
	if err := unix.Stat(h.secret, &st); err != nil {
		t.Fatal(err)
	}
	link := func(name string, ino uint64) Node {
		n := hFile(name, hello)
		n.Links, n.Inode = 2, ino
		return n
	}
	sub := h.tree(link("b", st.Ino), link("c", 77))
	root := h.tree(link("a", st.Ino), hDir("sub", sub), link("z", 77))
	dst, err := h.restore(h.manifest(root), "")
	if err != nil {
		t.Fatal(err)
	}
	h.assertConfined()
	var a, b, c, z unix.Stat_t
	for p, s := range map[string]*unix.Stat_t{"a": &a, "sub/b": &b, "sub/c": &c, "z": &z} {
		if err := unix.Lstat(filepath.Join(dst, p), s); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dst, p)); string(got) != "hello" {
			t.Fatalf("%s holds %q", p, got)
		}
	}
	if a.Ino == st.Ino || a.Ino != b.Ino || a.Nlink != 2 || c.Ino != z.Ino || c.Ino == a.Ino {
		t.Fatalf("hardlinks: a %d/%d, b %d, c %d, z %d, outside %d", a.Ino, a.Nlink, b.Ino, c.Ino, z.Ino, st.Ino)
	}
	// A single-path restore of a hardlinked file makes a new file.
	dst, err = h.restore(h.manifest(root), "sub/b")
	if err != nil {
		t.Fatal(err)
	}
	h.assertConfined()
	if got, _ := os.ReadFile(dst); string(got) != "hello" {
		t.Fatalf("single-path restore holds %q", got)
	}
}

// TestRestoreRefusesTreesNestedTooDeep restores a chain of directories
// deeper than maxDepth: it fails with pack.ErrCorrupt instead of
// recursing without bound.
func TestRestoreRefusesTreesNestedTooDeep(t *testing.T) {
	h := newHostileRig(t)
	var blobs []hBlob
	prev := h.s.codec.Sealer().ID(hEncode(t, &Tree{}))
	blobs = append(blobs, hBlob{pack.TreeBlob, hEncode(t, &Tree{})})
	for range maxDepth + 2 {
		b := hEncode(t, &Tree{Nodes: []Node{hDir("d", prev)}})
		blobs = append(blobs, hBlob{pack.TreeBlob, b})
		prev = h.s.codec.Sealer().ID(b)
	}
	_, ids := h.store(blobs...)
	_, err := h.restore(h.manifest(ids[len(ids)-1]), "")
	if !errors.Is(err, pack.ErrCorrupt) {
		t.Fatalf("restore of a tree %d deep: %v, want pack.ErrCorrupt", maxDepth+2, err)
	}
	h.assertConfined()
}

func hEncode(t testing.TB, tr *Tree) []byte {
	t.Helper()
	b, err := encodeTree(tr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unsafeReason reports why a tree validate accepted is unsafe ("" if safe):
// every name one component of 1..255 bytes without '/' or NUL and not "."
// or "..", names strictly increasing, known types, subtrees exactly on
// directories, content only on files.
func unsafeReason(tr *Tree) string {
	for i, n := range tr.Nodes {
		switch {
		case len(n.Name) == 0 || len(n.Name) > 255:
			return fmt.Sprintf("name length %d", len(n.Name))
		case bytes.ContainsAny(n.Name, "/\x00"):
			return fmt.Sprintf("name %q has / or NUL", n.Name)
		case string(n.Name) == "." || string(n.Name) == "..":
			return fmt.Sprintf("name %q", n.Name)
		case i > 0 && bytes.Compare(tr.Nodes[i-1].Name, n.Name) >= 0:
			return fmt.Sprintf("names %q, %q not strictly increasing", tr.Nodes[i-1].Name, n.Name)
		case n.Mode&^0o7777 != 0:
			return fmt.Sprintf("mode %o", n.Mode)
		case (n.Type == TypeDir) != (n.Subtree != nil):
			return fmt.Sprintf("%s with subtree %v", n.Type, n.Subtree)
		case n.Type != TypeFile && (len(n.Content) > 0 || len(n.Extents) > 0 || n.Sparse):
			return fmt.Sprintf("content on a %s", n.Type)
		case n.Type == TypeFile && (n.Size < 0 || n.dataLen() < 0 || n.dataLen() > n.Size):
			return fmt.Sprintf("file size %d, data %d", n.Size, n.dataLen())
		case n.Type == TypeSymlink && (len(n.Target) == 0 || bytes.IndexByte(n.Target, 0) >= 0):
			return fmt.Sprintf("symlink target %q", n.Target)
		}
		switch n.Type {
		case TypeFile, TypeDir, TypeSymlink, TypeFifo, TypeChar, TypeBlock, TypeSocket:
		default:
			return fmt.Sprintf("type %q", n.Type)
		}
	}
	return ""
}

// hostileSeeds are tree documents for the fuzzers: valid ones and the
// hostile shapes above.
func hostileSeeds(hello, sub seal.ID) []string {
	b64 := func(s string) string { x, _ := json.Marshal([]byte(s)); return string(x) }
	return []string{
		`{"nodes":[]}`,
		`{"nodes":[{"name":` + b64("a") + `,"type":"file","mode":420,"size":5,"mtime":1,"content":["` + hello.String() + `"]}]}`,
		`{"nodes":[{"name":` + b64("a") + `,"type":"file","mode":420,"size":5,"links":2,"ino":9,"content":["` + hello.String() + `"]},` +
			`{"name":` + b64("b") + `,"type":"file","mode":420,"size":5,"links":2,"ino":9,"content":["` + hello.String() + `"]}]}`,
		`{"nodes":[{"name":` + b64("d") + `,"type":"dir","mode":493,"subtree":"` + sub.String() + `"},` +
			`{"name":` + b64("l") + `,"type":"symlink","mode":511,"target":` + b64("/tmp") + `}]}`,
		`{"nodes":[{"name":` + b64("s") + `,"type":"file","mode":420,"size":100,"sparse":true,"extents":[{"o":10,"l":5}],"content":["` + hello.String() + `"]}]}`,
		`{"nodes":[{"name":` + b64("..") + `,"type":"file","mode":420}]}`,
		`{"nodes":[{"name":` + b64("a/b") + `,"type":"file","mode":420}]}`,
		`{"nodes":[{"name":` + b64("X") + `,"type":"symlink","target":` + b64("/tmp") + `},{"name":` + b64("X") + `,"type":"dir","subtree":"` + sub.String() + `"}]}`,
		`{"nodes":[{"name":` + b64("f") + `,"type":"fifo","mode":384},{"name":` + b64("n") + `,"type":"chardev","mode":438,"rdev":259}]}`,
		`{"nodes":null}`,
		`[]`,
	}
}

// FuzzTreeValidate decodes arbitrary bytes as a tree: validate never
// panics, and a tree it accepts has only safe, unique, sorted names and
// consistent entries.
func FuzzTreeValidate(f *testing.F) {
	for _, s := range hostileSeeds(seal.ID{1}, seal.ID{2}) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var tr Tree
		if err := json.Unmarshal(data, &tr); err != nil {
			return
		}
		if err := tr.validate(); err != nil {
			if !errors.Is(err, pack.ErrCorrupt) {
				t.Fatalf("validate error %v does not wrap pack.ErrCorrupt", err)
			}
			return
		}
		if why := unsafeReason(&tr); why != "" {
			t.Fatalf("validate accepted an unsafe tree: %s", why)
		}
	})
}

// FuzzRestoreCraftedTree seals arbitrary bytes as the root tree of a
// snapshot (authentic: sealed with the scope's key, beside a stored chunk
// "hello" and a small subtree it can name) and restores it. The restore
// never panics, never touches anything outside its target, and succeeds
// only if the root tree is valid.
func FuzzRestoreCraftedTree(f *testing.F) {
	h := newHostileRig(f)
	hello := h.data([]byte("hello"))
	sub := h.tree(hFile("inner", hello), hSymlink("up", ".."))
	for _, s := range hostileSeeds(hello, sub) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h.t = t
		keys, ids := h.store(hBlob{pack.TreeBlob, data})
		m := h.manifest(ids[0])
		dst, err := h.restore(m, "")
		var tr Tree
		valid := json.Unmarshal(data, &tr) == nil && tr.validate() == nil
		if err == nil && !valid {
			t.Fatalf("restore of an invalid root tree succeeded")
		}
		h.assertConfined()
		// Drop this input's objects and target so the next starts clean.
		ctx := context.Background()
		for _, k := range append(keys, manifestKey(h.s.name, m.ID)) {
			if err := h.s.r.store.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.s.loadIndex(ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
	})
}

// A manifest whose root is a symlink (or not a directory at all) would make
// the restore target itself point outside: refused.
func TestRestoreRefusesARootThatIsNotADirectory(t *testing.T) {
	h := newHostileRig(t)
	empty := h.tree()
	for _, root := range []Node{
		{Name: []byte("/"), Type: TypeSymlink, Target: []byte(filepath.Join(h.sandbox, "outside")), Subtree: &empty},
		{Name: []byte("/"), Type: TypeFile, Mode: 0o644},
		{Name: []byte("/"), Type: TypeDir, Mode: 0o40755, Subtree: &empty},
	} {
		m := &Manifest{Scope: h.s.name, Time: time.Now().UTC(), Tree: empty, Source: "hostile", Root: root}
		if err := h.s.writeManifest(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if _, err := h.restore(m, ""); !errors.Is(err, pack.ErrCorrupt) {
			t.Fatalf("root %s mode %o: %v, want pack.ErrCorrupt", root.Type, root.Mode, err)
		}
	}
	h.assertConfined()
}

// Directories that all share one subtree describe 2^depth entries in a
// few blobs: the restore stops at its entry bound instead of running on.
func TestRestoreStopsAtTheEntryBoundOnSharedSubtrees(t *testing.T) {
	h := newHostileRig(t)
	h.s.maxEntries = 5000
	prev := h.tree(hFile("f"))
	for range 40 {
		prev = h.tree(hDir("a", prev), hDir("b", prev))
	}
	m := h.manifest(prev)
	done := make(chan error, 1)
	go func() { _, err := h.restore(m, ""); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, pack.ErrCorrupt) {
			t.Fatalf("restore of 2^40 entries: %v, want pack.ErrCorrupt", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("restore of a self-sharing tree still running after 2 minutes")
	}
}

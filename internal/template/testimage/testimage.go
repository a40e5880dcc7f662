// Package testimage builds a small, real container image for tests that
// cannot reach a registry. The image runs busybox (Debian package
// busybox-static provides the static /bin/busybox it copies) and exercises
// the corners of image import: two layers, a whiteout, an opaque directory, a
// symlink, a hardlink within a layer and one across layers, an xattr, a
// foreign owner and a world-writable directory with the wrong mode.
package testimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxPath is where Debian's busybox-static package installs its binary.
const BusyboxPath = "/bin/busybox"

// Tag names the image in the layout (org.opencontainers.image.ref.name) and
// in the docker archive (as Ref).
const Tag = "latest"

// Ref is the repository:tag of the image in the docker archive.
const Ref = "stead.test/busybox:" + Tag

// Applets returns the busybox applets the image links into /bin.
func Applets() []string {
	return []string{
		"sh", "ls", "cat", "echo", "sleep", "id", "env", "true", "false", "mkdir", "rm",
		"touch", "stat", "readlink", "grep", "head", "wc", "whoami", "test", "uname", "ps",
	}
}

// What the image holds, for assertions.
const (
	// RemovedFile is in layer 1 and deleted by a whiteout in layer 2.
	RemovedFile = "etc/removeme"
	// OpaqueDir is filled in layer 1 and made opaque in layer 2.
	OpaqueDir = "opt/old"
	// OpaqueLowerFile is hidden by the opaque directory.
	OpaqueLowerFile = "opt/old/lower.txt"
	// OpaqueUpperFile is the only file of OpaqueDir in the flattened image.
	OpaqueUpperFile = "opt/old/upper.txt"
	// Motd and MotdLink are hardlinked in layer 1.
	Motd     = "etc/motd"
	MotdLink = "etc/motd.hard"
	// CrossLink (layer 2) is a hardlink to /bin/busybox (layer 1).
	CrossLink = "bin/busybox.hard"
	// EnvLink is a relative symlink (layer 2) to /bin/busybox.
	EnvLink       = "usr/bin/env"
	EnvLinkTarget = "../../bin/busybox"
	// XattrFile carries the user xattr XattrName=XattrValue.
	XattrFile  = "usr/share/stead.txt"
	XattrName  = "user.stead.test"
	XattrValue = "yes"
	// OwnedFile belongs to OwnedUID:OwnedGID.
	OwnedFile = "srv/owned.txt"
	OwnedUID  = 1234
	OwnedGID  = 5678
	// Layer2File is a plain file added by layer 2.
	Layer2File    = "etc/layer2.txt"
	Layer2Content = "from layer 2\n"
)

// Config is the configuration of the image.
func Config() v1.Config {
	return v1.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "STEAD_TEST=1"},
		WorkingDir: "/workspace",
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"echo hi"},
		User:       "agent",
	}
}

// Build writes the test image into dir twice, as an OCI image layout and as
// a `docker save` tarball, and returns their paths. It fails the test when
// busybox-static is not installed.
func Build(t testing.TB, dir string) (layoutPath, dockerTarPath string) {
	t.Helper()
	img := Image(t)
	layoutPath = filepath.Join(dir, "layout")
	WriteLayout(t, layoutPath, img)
	dockerTarPath = filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(dockerTarPath, name.MustParseReference(Ref), img); err != nil {
		t.Fatalf("write docker archive: %v", err)
	}
	return layoutPath, dockerTarPath
}

// Image returns the test image.
func Image(t testing.TB) v1.Image {
	t.Helper()
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		t.Fatalf("read %s (install it: apt-get install -y busybox-static): %v", BusyboxPath, err)
	}
	if f, err := elf.NewFile(bytes.NewReader(bb)); err != nil {
		t.Fatalf("%s is not an ELF binary: %v", BusyboxPath, err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatalf("%s is dynamically linked; install busybox-static", BusyboxPath)
			}
		}
	}

	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	dir := func(n string, mode int64) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: mode, ModTime: mtime}
	}
	file := func(n, body string, mode int64) entry {
		return entry{&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: mode, Size: int64(len(body)), ModTime: mtime}, []byte(body)}
	}

	l1 := []entry{
		{h: dir("bin", 0o755)},
		{h: &tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: mtime}, body: bb},
	}
	for _, a := range Applets() {
		l1 = append(l1, entry{h: &tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mtime}})
	}
	l1 = append(l1,
		entry{h: dir("etc", 0o755)},
		// No final newline: the agent line must still land on its own line.
		file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false", 0o644),
		file(RemovedFile, "deleted by layer 2\n", 0o644),
		file(Motd, "hello from layer 1\n", 0o644),
		entry{h: &tar.Header{Typeflag: tar.TypeLink, Name: MotdLink, Linkname: Motd, ModTime: mtime}},
		entry{h: dir("opt", 0o755)},
		entry{h: dir(OpaqueDir, 0o755)},
		file(OpaqueLowerFile, "hidden by the opaque marker\n", 0o644),
		entry{h: dir("tmp", 0o755)}, // wrong on purpose: import makes it 1777
		entry{h: dir("usr", 0o755)},
		entry{h: dir("usr/share", 0o755)},
		func() entry {
			e := file(XattrFile, "has an xattr\n", 0o644)
			e.h.PAXRecords = map[string]string{"SCHILY.xattr." + XattrName: XattrValue}
			return e
		}(),
	)
	l2 := []entry{
		{h: dir("etc", 0o755)},
		{h: &tar.Header{Typeflag: tar.TypeReg, Name: "etc/.wh.removeme", Mode: 0o600, ModTime: mtime}},
		file(Layer2File, Layer2Content, 0o644),
		{h: dir(OpaqueDir, 0o755)},
		{h: &tar.Header{Typeflag: tar.TypeReg, Name: OpaqueDir + "/.wh..wh..opq", Mode: 0o600, ModTime: mtime}},
		file(OpaqueUpperFile, "above the opaque marker\n", 0o644),
		{h: dir("bin", 0o755)},
		{h: &tar.Header{Typeflag: tar.TypeLink, Name: CrossLink, Linkname: "bin/busybox", ModTime: mtime}},
		{h: dir("usr", 0o755)},
		{h: dir("usr/bin", 0o755)},
		{h: &tar.Header{Typeflag: tar.TypeSymlink, Name: EnvLink, Linkname: EnvLinkTarget, Mode: 0o777, ModTime: mtime}},
		{h: dir("srv", 0o755)},
		func() entry {
			e := file(OwnedFile, "owned by someone else\n", 0o640)
			e.h.Uid, e.h.Gid = OwnedUID, OwnedGID
			return e
		}(),
	}

	img := empty.Image
	for i, l := range [][]entry{l1, l2} {
		data := tarOf(t, l)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
		if err != nil {
			t.Fatalf("make layer %d: %v", i+1, err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatalf("append layer %d: %v", i+1, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("read config: %v", err)
	}
	cf = cf.DeepCopy()
	cf.Config = Config()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatalf("set config: %v", err)
	}
	return img
}

// entry is one member of a layer tar.
type entry struct {
	h    *tar.Header
	body []byte
}

// Member is one entry of a layer built by Layer: a header and, for a regular
// file, its content (Header.Size is set from Body when zero).
type Member struct {
	Header *tar.Header
	Body   []byte
}

// Layer returns a gzip-compressed layer holding members, for tests that need
// an image of their own (hostile paths, odd owners).
func Layer(t testing.TB, members ...Member) v1.Layer {
	t.Helper()
	entries := make([]entry, len(members))
	for i, m := range members {
		if m.Header.Typeflag == tar.TypeReg && m.Header.Size == 0 {
			m.Header.Size = int64(len(m.Body))
		}
		entries[i] = entry{m.Header, m.Body}
	}
	data := tarOf(t, entries)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		t.Fatalf("make layer: %v", err)
	}
	return l
}

// WriteLayout writes img as the only image (tagged Tag) of a new OCI image
// layout at dir.
func WriteLayout(t testing.TB, dir string, img v1.Image) {
	t.Helper()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatalf("write OCI layout: %v", err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": Tag,
	})); err != nil {
		t.Fatalf("append image to OCI layout: %v", err)
	}
}

// BuildRawDockerArchive writes the test image into dir as a docker archive
// whose layers are stored as plain, uncompressed tars, as `docker save` of
// Docker >= 25 does (package tarball only writes compressed layers), and
// returns its path.
func BuildRawDockerArchive(t testing.TB, dir string) string {
	t.Helper()
	img := Image(t)
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatalf("read config: %v", err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatalf("list layers: %v", err)
	}
	p := filepath.Join(dir, "raw-image.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(n string, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data))}); err != nil {
			t.Fatalf("write %s: %v", n, err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatalf("write %s: %v", n, err)
		}
	}
	var names []string
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatalf("read layer %d: %v", i, err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read layer %d: %v", i, err)
		}
		n := fmt.Sprintf("layer%d/layer.tar", i)
		put(n, data)
		names = append(names, n)
	}
	put("config.json", rawCfg)
	manifest, err := json.Marshal([]map[string]any{{
		"Config": "config.json", "RepoTags": []string{Ref}, "Layers": names,
	}})
	if err != nil {
		t.Fatalf("encode manifest: %v", err)
	}
	put("manifest.json", manifest)
	if err := tw.Close(); err != nil {
		t.Fatalf("close %s: %v", p, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", p, err)
	}
	return p
}

func tarOf(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.h.Format = tar.FormatPAX
		if err := tw.WriteHeader(e.h); err != nil {
			t.Fatalf("write tar header %s: %v", e.h.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatalf("write tar body %s: %v", e.h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("close tar: %v", err)
	}
	return buf.Bytes()
}

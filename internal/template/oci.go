package template

import (
	"archive/tar"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/stead-dev/stead/internal/files"
)

// Source prefixes understood by ImportOCI.
const (
	// SourceOCILayout selects an OCI image layout directory:
	// "oci-layout:/path[:tag-or-digest]".
	SourceOCILayout = "oci-layout:"
	// SourceDockerArchive selects a `docker save` tarball:
	// "docker-archive:/path.tar[:repo:tag]".
	SourceDockerArchive = "docker-archive:"
)

// ImageInfo describes an imported image: what a sandbox started from it needs
// from the image configuration.
type ImageInfo struct {
	// Digest identifies the image: the manifest digest for an OCI layout or a
	// registry image, the config digest (Docker's image ID) for a docker
	// archive, which carries no manifest digest.
	Digest string
	// Env is the image's environment, "KEY=value" each.
	Env []string
	// WorkingDir is the image's working directory ("" if unset).
	WorkingDir string
	// Entrypoint is the image's entrypoint.
	Entrypoint []string
	// Cmd is the image's default command (the entrypoint's arguments).
	Cmd []string
	// User is the image's configured user ("" if unset).
	User string
	// Size is the total size in bytes of the regular files extracted into
	// the template.
	Size int64
}

// ImportOCI extracts the root filesystem of an image into dst, which must be
// absent or an empty directory, and returns the image's configuration.
//
// source is "oci-layout:/path[:tag-or-digest]" (an OCI image layout; the tag
// may be omitted when the layout holds a single image), "docker-archive:/path
// .tar[:repo:tag]" (a `docker save` tarball; the tag may be omitted when it
// holds a single image), or else a registry reference ("debian:bookworm").
// A multi-platform image resolves to linux on the running architecture.
//
// The layers are flattened with whiteouts applied and extracted through
// files.Root.ExtractTar with owners preserved, so no entry of the image can
// land outside dst. Then the sandbox conventions are applied: /workspace,
// /data and /home/agent exist and belong to uid:gid 1000:1000; /tmp is 1777;
// /var/log, /.stead, /proc, /sys, /dev and /run exist; an "agent" user (uid
// 1000) and group (gid 1000) are appended to /etc/passwd and /etc/group when
// missing (the files are created when the image has none).
//
// progress, when not nil, is called with the bytes of stored layer data read
// so far (compressed, as held by the source) and their total, from one
// goroutine at a time that need not be the caller's; its last call has done ==
// total. A source that cannot be read fails before dst is touched; any later
// failure leaves dst empty (removed if ImportOCI created it).
func ImportOCI(ctx context.Context, source, dst string, progress func(done, total int64)) (ImageInfo, error) {
	si, err := openImage(ctx, source)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("import image %s: %w", source, err)
	}
	info, err := extractImage(ctx, si, dst, progress)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("import image %s into %s: %w", source, dst, err)
	}
	return info, nil
}

// sourceImage is an opened image with what ImportOCI must know beyond
// v1.Image: how to name it and how its layers are stored.
type sourceImage struct {
	img    v1.Image
	digest string
	// rawLayers: the stored layers are plain tars (a docker archive written
	// by Docker >= 25, or by go-containerregistry), so progress counts the
	// uncompressed stream; else it counts the compressed blob.
	rawLayers bool
	// sizes are the stored sizes of the layers, in img.Layers() order.
	sizes []int64
}

// openImage resolves source and reads what it can without touching the
// destination: the manifest, the config and the layer sizes.
func openImage(ctx context.Context, source string) (*sourceImage, error) {
	var (
		si  *sourceImage
		err error
	)
	switch {
	case strings.HasPrefix(source, SourceOCILayout):
		si, err = openLayout(strings.TrimPrefix(source, SourceOCILayout))
	case strings.HasPrefix(source, SourceDockerArchive):
		si, err = openDockerArchive(strings.TrimPrefix(source, SourceDockerArchive))
	default:
		si, err = openRemote(ctx, source)
	}
	if err != nil {
		return nil, err
	}
	if _, err := si.img.ConfigFile(); err != nil {
		return nil, fmt.Errorf("read image config: %w", err)
	}
	if si.sizes == nil {
		layers, err := si.img.Layers()
		if err != nil {
			return nil, fmt.Errorf("list layers: %w", err)
		}
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return nil, fmt.Errorf("read layer size: %w", err)
			}
			si.sizes = append(si.sizes, n)
		}
	}
	return si, nil
}

// splitSource splits "path[:ref]" where path may itself hold colons: the
// longest prefix that exists and satisfies ok is the path.
func splitSource(s string, ok func(fs.FileInfo) bool) (p, ref string, err error) {
	if s == "" {
		return "", "", errors.New("missing path")
	}
	for i := len(s); i > 0; i = strings.LastIndexByte(s[:i], ':') {
		fi, err := os.Stat(s[:i])
		if err == nil && ok(fi) {
			if i == len(s) {
				return s, "", nil
			}
			return s[:i], s[i+1:], nil
		}
	}
	// Report the error for the most plausible path: up to the first colon
	// after the last slash.
	p = s
	if slash := strings.LastIndexByte(s, '/'); slash >= 0 {
		if c := strings.IndexByte(s[slash:], ':'); c >= 0 {
			p = s[:slash+c]
		}
	}
	if _, err := os.Stat(p); err != nil {
		return "", "", err
	}
	return "", "", fmt.Errorf("%s: wrong file type", p)
}

// openLayout opens an image of an OCI image layout.
func openLayout(spec string) (*sourceImage, error) {
	dir, ref, err := splitSource(spec, func(fi fs.FileInfo) bool { return fi.IsDir() })
	if err != nil {
		return nil, fmt.Errorf("open OCI layout: %w", err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	img, digest, err := pickImage(idx, ref)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	return &sourceImage{img: img, digest: digest}, nil
}

// Annotations naming an image in an OCI layout's index.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// pickImage selects the image named ref ("" for the only one; a tag or a
// digest) from an image index, descending into nested indexes by platform.
func pickImage(idx v1.ImageIndex, ref string) (v1.Image, string, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("read index: %w", err)
	}
	var found []v1.Descriptor
	for _, d := range im.Manifests {
		switch {
		case ref == "":
			found = append(found, d)
		case strings.HasPrefix(ref, "sha256:"):
			if d.Digest.String() == ref {
				found = append(found, d)
			}
		default:
			rn := d.Annotations[annotationRefName]
			cn := d.Annotations[annotationContainerdName]
			if rn == ref || cn == ref || strings.HasSuffix(rn, ":"+ref) || strings.HasSuffix(cn, ":"+ref) {
				found = append(found, d)
			}
		}
	}
	switch {
	case len(found) == 0 && ref != "":
		return nil, "", fmt.Errorf("no image %q (tags: %s)", ref, strings.Join(layoutTags(im), ", "))
	case len(found) == 0:
		return nil, "", errors.New("no image in the index")
	case len(found) > 1:
		return nil, "", fmt.Errorf("%d images match %q; name one (tags: %s)", len(found), ref, strings.Join(layoutTags(im), ", "))
	}
	d := found[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, "", fmt.Errorf("open index %s: %w", d.Digest, err)
		}
		return pickPlatform(child)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, "", fmt.Errorf("open image %s: %w", d.Digest, err)
	}
	return img, d.Digest.String(), nil
}

// pickPlatform selects the linux image of the running architecture from a
// multi-platform index.
func pickPlatform(idx v1.ImageIndex) (v1.Image, string, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("read index: %w", err)
	}
	want := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	for _, d := range im.Manifests {
		if d.Platform == nil || !d.Platform.Satisfies(want) || !d.MediaType.IsImage() {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, "", fmt.Errorf("open image %s: %w", d.Digest, err)
		}
		return img, d.Digest.String(), nil
	}
	return nil, "", fmt.Errorf("no image for %s/%s in the index", want.OS, want.Architecture)
}

// layoutTags lists the names an index gives its images, for error messages.
func layoutTags(im *v1.IndexManifest) []string {
	var tags []string
	for _, d := range im.Manifests {
		if n := d.Annotations[annotationRefName]; n != "" {
			tags = append(tags, n)
		}
	}
	if len(tags) == 0 {
		return []string{"none"}
	}
	return tags
}

// openDockerArchive opens an image of a `docker save` tarball.
func openDockerArchive(spec string) (*sourceImage, error) {
	p, ref, err := splitSource(spec, func(fi fs.FileInfo) bool { return fi.Mode().IsRegular() })
	if err != nil {
		return nil, fmt.Errorf("open docker archive: %w", err)
	}
	var tag *name.Tag
	if ref != "" {
		t, err := name.NewTag(ref)
		if err != nil {
			return nil, fmt.Errorf("open docker archive %s: parse tag: %w", p, err)
		}
		tag = &t
	}
	img, err := tarball.ImageFromPath(p, tag)
	if err != nil {
		return nil, fmt.Errorf("open docker archive %s: %w", p, err)
	}
	sizes, raw, err := dockerArchiveLayers(p, tag)
	if err != nil {
		return nil, fmt.Errorf("open docker archive %s: %w", p, err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, fmt.Errorf("open docker archive %s: read config: %w", p, err)
	}
	return &sourceImage{img: img, digest: cfg.String(), rawLayers: raw, sizes: sizes}, nil
}

// openRemote opens an image of a registry.
func openRemote(ctx context.Context, source string) (*sourceImage, error) {
	ref, err := name.ParseReference(source)
	if err != nil {
		return nil, fmt.Errorf("parse image reference (a local image is %s/path or %s/path.tar): %w",
			SourceOCILayout, SourceDockerArchive, err)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, fmt.Errorf("fetch image %s from registry: %w", ref.Name(), err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("fetch image %s from registry: %w", ref.Name(), err)
	}
	return &sourceImage{img: img, digest: d.String()}, nil
}

// dockerArchiveLayers reads the stored sizes of an archive's layers (in
// manifest order) and whether they are stored as plain tars, judged, as
// package tarball does, by the first layer.
func dockerArchiveLayers(archive string, tag *name.Tag) (sizes []int64, raw bool, err error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		return nil, false, fmt.Errorf("read manifest.json: %w", err)
	}
	var desc *tarball.Descriptor
	for i := range m {
		if tag == nil {
			desc = &m[i]
			break
		}
		for _, rt := range m[i].RepoTags {
			if t, err := name.NewTag(rt); err == nil && t.String() == tag.String() {
				desc = &m[i]
			}
		}
	}
	if desc == nil {
		return nil, false, errors.New("no matching image in manifest.json")
	}

	type entry struct {
		typ   byte
		link  string
		size  int64
		magic []byte
	}
	entries := map[string]entry{}
	f, err := os.Open(archive)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("read archive: %w", err)
		}
		e := entry{typ: h.Typeflag, link: h.Linkname, size: h.Size}
		if h.Typeflag == tar.TypeReg {
			buf := make([]byte, 4)
			n, _ := io.ReadFull(tr, buf)
			e.magic = buf[:n]
		}
		entries[path.Clean(h.Name)] = e
	}
	for i, l := range desc.Layers {
		p := path.Clean(l)
		var e entry
		for hop := 0; ; hop++ {
			var ok bool
			if e, ok = entries[p]; !ok {
				return nil, false, fmt.Errorf("layer %s missing from archive", l)
			}
			if hop > 16 {
				return nil, false, fmt.Errorf("layer %s: too many links", l)
			}
			switch e.typ {
			case tar.TypeSymlink:
				p = path.Clean(path.Join(path.Dir(p), e.link))
				continue
			case tar.TypeLink:
				p = path.Clean(e.link)
				continue
			}
			break
		}
		if i == 0 {
			raw = !compressedMagic(e.magic)
		}
		sizes = append(sizes, e.size)
	}
	return sizes, raw, nil
}

// compressedMagic reports whether a blob starts like gzip or zstd data.
func compressedMagic(b []byte) bool {
	return (len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b) ||
		(len(b) >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd)
}

// extractImage flattens img into dst and applies the sandbox conventions.
func extractImage(ctx context.Context, si *sourceImage, dst string, progress func(done, total int64)) (info ImageInfo, err error) {
	cf, err := si.img.ConfigFile()
	if err != nil {
		return ImageInfo{}, fmt.Errorf("read image config: %w", err)
	}
	layers, err := si.img.Layers()
	if err != nil {
		return ImageInfo{}, fmt.Errorf("list layers: %w", err)
	}
	if len(layers) != len(si.sizes) || len(layers) != len(cf.RootFS.DiffIDs) {
		return ImageInfo{}, fmt.Errorf("image has %d layers, %d layer sizes and %d diff ids",
			len(layers), len(si.sizes), len(cf.RootFS.DiffIDs))
	}
	pc := &progressCounter{fn: progress}
	counted := make([]v1.Layer, len(layers))
	for i, l := range layers {
		pc.total += si.sizes[i]
		counted[i] = &countedLayer{Layer: l, raw: si.rawLayers, pc: pc, diffID: cf.RootFS.DiffIDs[i]}
	}

	created, err := prepareEmptyDir(dst)
	if err != nil {
		return ImageInfo{}, err
	}
	defer func() {
		if err != nil {
			cleanupDir(dst, created)
		}
	}()

	root, err := files.OpenRoot(dst)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("open destination: %w", err)
	}
	defer root.Close()

	fl := flatten(ctx, &layeredImage{Image: si.img, layers: counted})
	extractErr := root.ExtractTar(ctx, "/", fl, files.ExtractOptions{PreserveOwner: true})
	size, flattenErr := fl.finish()
	switch {
	case flattenErr != nil && !errors.Is(flattenErr, io.ErrClosedPipe):
		return ImageInfo{}, fmt.Errorf("flatten layers: %w", flattenErr)
	case extractErr != nil:
		return ImageInfo{}, fmt.Errorf("extract layers: %w", extractErr)
	}
	if err := applyConventions(dst); err != nil {
		return ImageInfo{}, err
	}
	pc.finish()
	return ImageInfo{
		Digest:     si.digest,
		Env:        cf.Config.Env,
		WorkingDir: cf.Config.WorkingDir,
		Entrypoint: cf.Config.Entrypoint,
		Cmd:        cf.Config.Cmd,
		User:       cf.Config.User,
		Size:       size,
	}, nil
}

// layeredImage is img with its layers replaced (by counting wrappers); it is
// only used by mutate.Extract, which reads nothing but Layers.
type layeredImage struct {
	v1.Image
	layers []v1.Layer
}

// Layers implements v1.Image.
func (i *layeredImage) Layers() ([]v1.Layer, error) { return i.layers, nil }

// progressCounter adds up the stored bytes read and reports them, at most
// once per progressStep bytes.
type progressCounter struct {
	fn          func(done, total int64)
	mu          sync.Mutex
	done, total int64
	reported    int64
}

const progressStep = 256 << 10

func (p *progressCounter) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.done > p.total {
		p.total = p.done // a source that lied about a size
	}
	if p.fn != nil && p.done-p.reported >= progressStep {
		p.reported = p.done
		p.fn(p.done, p.total)
	}
}

// finish reports the end: done == total.
func (p *progressCounter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fn != nil {
		p.fn(p.total, p.total)
	}
}

// countingReader counts the bytes read through it into a progressCounter.
type countingReader struct {
	io.ReadCloser
	pc *progressCounter
}

func (r *countingReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	if n > 0 {
		r.pc.add(int64(n))
	}
	return n, err
}

// countedLayer counts the stored bytes of a layer as mutate.Extract reads
// its uncompressed stream: the compressed blob, or the plain tar when the
// source stores it uncompressed (asking such a layer for Compressed would
// gzip it on the fly). It also checks the uncompressed stream against the
// config's diff id: neither an OCI layout nor a docker archive is verified
// by go-containerregistry, and a corrupt template must not pass silently.
type countedLayer struct {
	v1.Layer
	raw    bool
	pc     *progressCounter
	diffID v1.Hash
}

// Uncompressed implements v1.Layer.
func (l *countedLayer) Uncompressed() (io.ReadCloser, error) {
	var rc io.ReadCloser
	if l.raw {
		u, err := l.Layer.Uncompressed()
		if err != nil {
			return nil, err
		}
		rc = &countingReader{ReadCloser: u, pc: l.pc}
	} else {
		ul, err := partial.CompressedToLayer(&countedBlob{Layer: l.Layer, pc: l.pc})
		if err != nil {
			return nil, err
		}
		if rc, err = ul.Uncompressed(); err != nil {
			return nil, err
		}
	}
	h, err := v1.Hasher(l.diffID.Algorithm)
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("layer %s: %w", l.diffID, err)
	}
	return &verifyingReader{ReadCloser: rc, h: h, want: l.diffID}, nil
}

// verifyingReader hashes a layer's uncompressed stream and turns its end
// into an error when the hash is not the expected diff id.
type verifyingReader struct {
	io.ReadCloser
	h    hash.Hash
	want v1.Hash
}

func (r *verifyingReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	r.h.Write(b[:n])
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(r.h.Sum(nil)); got != r.want.Hex {
			return n, fmt.Errorf("layer content %s:%s does not match its diff id %s", r.want.Algorithm, got, r.want)
		}
	}
	return n, err
}

// countedBlob is a layer whose compressed stream is counted; partial
// decompresses it (gzip, zstd or none, by peeking).
type countedBlob struct {
	v1.Layer
	pc *progressCounter
}

// Compressed implements partial.CompressedLayer.
func (b *countedBlob) Compressed() (io.ReadCloser, error) {
	rc, err := b.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: rc, pc: b.pc}, nil
}

// flattened is the flattened tar stream of an image being produced by a
// goroutine.
type flattened struct {
	*io.PipeReader
	done chan struct{}
	size int64 // regular file bytes; valid after done
	err  error // valid after done
}

// finish stops the producer if it still runs and returns the regular-file
// byte count and the producer's error.
func (f *flattened) finish() (int64, error) {
	f.PipeReader.Close()
	<-f.done
	return f.size, f.err
}

// flatten returns the flattened filesystem of img as one tar stream, with
// whiteouts applied (mutate.Extract). mutate.Extract emits the upper layers
// first, so a hardlink in an upper layer may precede its target from a lower
// layer: such links are held back until their target has been emitted, and a
// link whose target no longer exists in the flattened image (deleted by a
// whiteout) is left out with a warning.
func flatten(ctx context.Context, img v1.Image) *flattened {
	pr, pw := io.Pipe()
	f := &flattened{PipeReader: pr, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		src := mutate.Extract(img)
		f.size, f.err = relayLinksLast(ctx, src, pw)
		src.Close()
		pw.CloseWithError(f.err)
	}()
	return f
}

// tarKey normalises an archive path for comparisons.
func tarKey(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// relayLinksLast copies the tar stream src to w, deferring each hardlink
// whose target has not been copied yet, and returns the bytes of regular file
// content copied. It reads src to its end: mutate.Extract closes its tar
// (writing a valid end-of-archive) before it reports an error such as a layer
// digest mismatch or an unsafe path, so the error only shows after the
// trailer, and the output must not be terminated before it has been seen.
func relayLinksLast(ctx context.Context, src io.Reader, w io.Writer) (int64, error) {
	tr := tar.NewReader(src)
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	var deferred []*tar.Header
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return size, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return size, err
		}
		// Names relative to the root, as ExtractTar wants them ("/etc/x" and
		// "./etc/x" appear in the wild).
		if h.Name = tarKey(h.Name); h.Name == "" {
			if h.Typeflag != tar.TypeDir {
				continue
			}
			h.Name = "."
		}
		if h.Typeflag == tar.TypeLink {
			h.Linkname = tarKey(h.Linkname)
		}
		if h.Typeflag == tar.TypeLink && !written[h.Linkname] {
			deferred = append(deferred, h)
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return size, fmt.Errorf("write %s: %w", h.Name, err)
		}
		n, err := io.Copy(tw, tr)
		if h.Typeflag == tar.TypeReg {
			size += n
		}
		if err != nil {
			return size, fmt.Errorf("copy %s: %w", h.Name, err)
		}
		written[h.Name] = true
	}
	if _, err := io.Copy(io.Discard, src); err != nil {
		return size, err
	}
	// Links to links: repeat while some link found its target.
	for progressed := true; progressed && len(deferred) > 0; {
		progressed = false
		rest := deferred[:0]
		for _, h := range deferred {
			if !written[h.Linkname] {
				rest = append(rest, h)
				continue
			}
			if err := tw.WriteHeader(h); err != nil {
				return size, fmt.Errorf("write %s: %w", h.Name, err)
			}
			written[h.Name] = true
			progressed = true
		}
		deferred = rest
	}
	for _, h := range deferred {
		slog.Warn("image hardlink has no target in the flattened image; left out", "path", h.Name, "target", h.Linkname)
	}
	if err := tw.Close(); err != nil {
		return size, fmt.Errorf("finish tar: %w", err)
	}
	return size, nil
}

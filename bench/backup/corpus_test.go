package main

import (
	"bytes"
	"compress/flate"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/treedigest"
)

func generate(t *testing.T, seed uint64) (string, CorpusStats) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "corpus")
	st, err := Generate(context.Background(), dir, seed, SmallSpec())
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return dir, st
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	e, err := treedigest.Entries(context.Background(), dir, treedigest.Options{})
	if err != nil {
		t.Fatalf("digest %s: %v", dir, err)
	}
	return e
}

func TestGenerateSameSeedGivesByteIdenticalTree(t *testing.T) {
	a, sa := generate(t, 7)
	b, sb := generate(t, 7)
	if d := treedigest.Diff(entries(t, a), entries(t, b)); d != nil {
		t.Fatalf("same seed, different trees:\n%s", strings.Join(d[:min(len(d), 10)], "\n"))
	}
	if sa.RealBytes != sb.RealBytes || sa.Files != sb.Files {
		t.Fatalf("stats differ: %+v vs %+v", sa, sb)
	}
	c, _ := generate(t, 8)
	if treedigest.Diff(entries(t, a), entries(t, c)) == nil {
		t.Fatal("seeds 7 and 8 gave the same tree")
	}
}

func TestGenerateRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(context.Background(), dir, 1, SmallSpec()); err == nil {
		t.Fatal("Generate into a non-empty dir succeeded")
	}
}

func TestGenerateCountsFilesAndRealData(t *testing.T) {
	dir, st := generate(t, 1)
	spec := SmallSpec()
	minFiles := spec.TextFiles + spec.LooseObjects + len(spec.Binaries) + spec.Sparse + spec.HardlinkGroups
	if st.Files < minFiles {
		t.Errorf("Files = %d, want >= %d", st.Files, minFiles)
	}
	if st.Inodes >= st.Files {
		t.Errorf("Inodes = %d, Files = %d: hardlinks not counted once", st.Inodes, st.Files)
	}
	var bins int64
	for _, b := range spec.Binaries {
		bins += b
	}
	if st.ByTop["data"] != bins {
		t.Errorf("real data under data/ = %d, want %d", st.ByTop["data"], bins)
	}
	if st.ByTop["blobs"] < spec.BlobTotal || st.ByTop["blobs"] > spec.BlobTotal+spec.BlobMax {
		t.Errorf("real data under blobs/ = %d, want about %d", st.ByTop["blobs"], spec.BlobTotal)
	}
	if st.Apparent-st.RealBytes < int64(spec.Sparse)*(spec.SparseSize-spec.SparseMax) {
		t.Errorf("apparent %d - real %d: sparse holes not excluded", st.Apparent, st.RealBytes)
	}
	var alloc int64
	seen := map[uint64]bool{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		s := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().IsRegular() && !seen[s.Ino] {
			seen[s.Ino] = true
			alloc += s.Blocks * 512
		}
		return nil
	})
	if alloc < st.RealBytes || alloc > st.RealBytes+int64(st.Inodes)*4096 {
		t.Errorf("allocated %d bytes for %d bytes of real data", alloc, st.RealBytes)
	}
}

func TestGenerateWritesSparseFilesWithAlignedExtents(t *testing.T) {
	dir, _ := generate(t, 3)
	spec := SmallSpec()
	names, _ := filepath.Glob(filepath.Join(dir, "sparse", "*"))
	if len(names) != spec.Sparse {
		t.Fatalf("%d sparse files, want %d", len(names), spec.Sparse)
	}
	for _, p := range names {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != spec.SparseSize {
			t.Errorf("%s: size %d, want %d", p, fi.Size(), spec.SparseSize)
		}
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var data int64
		for off := int64(0); off < fi.Size(); {
			start, err := unix.Seek(fd, off, unix.SEEK_DATA)
			if err == unix.ENXIO {
				break
			}
			end, _ := unix.Seek(fd, start, unix.SEEK_HOLE)
			if start%mib != 0 || end%mib != 0 {
				t.Errorf("%s: extent %d-%d not 1 MiB aligned", p, start, end)
			}
			data += end - start
			off = end
		}
		unix.Close(fd)
		if data < spec.SparseMin || data > spec.SparseMax {
			t.Errorf("%s: %d bytes of data, want %d..%d", p, data, spec.SparseMin, spec.SparseMax)
		}
	}
}

func TestGenerateCoversLinksModesXattrsAndOddNames(t *testing.T) {
	dir, _ := generate(t, 1)
	lines := strings.Join(entries(t, dir), "\n")
	for _, want := range []string{
		`"/links/readme" type=symlink`, `target="../src/README.md"`,
		`target="/etc/hostname"`, `target="/nonexistent/stead-bench/target"`,
		`"/links/loop-a" type=symlink`,
		`"/odd/shared" type=dir mode=2775`, `"/odd/tmp" type=dir mode=1777`, `"/odd/secret" type=dir mode=0700`,
		`"/odd/private.key" type=file mode=0600`, `"/odd/run.sh" type=file mode=0755`, `"/odd/setuid-like" type=file mode=4755`,
		`"/odd/caf\xe9-r\xe9sum\xe9.txt"`,
		`xattr:"user.origin"=`, `xattr:"user.project"=`, `xattr:"user.blob"=`,
		" link=1", " link=2",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("corpus has no entry matching %q", want)
		}
	}
	var long bool
	for _, e := range entries(t, dir) {
		name, _, _ := strings.Cut(e, " type=")
		if i := strings.LastIndex(name, "/"); len(name)-i-2 == 200 {
			long = true
		}
	}
	if !long {
		t.Error("no 200-byte name")
	}
	if _, err := os.Stat(filepath.Join(dir, "links", "dangling-rel")); !os.IsNotExist(err) {
		t.Errorf("dangling symlink resolves: %v", err)
	}
	git, _ := filepath.Glob(filepath.Join(dir, "src/.git/objects/pack/*.pack"))
	if len(git) != len(SmallSpec().Packs) {
		t.Errorf("%d packs, want %d", len(git), len(SmallSpec().Packs))
	}
}

func ratio(t *testing.T, data []byte) float64 {
	t.Helper()
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.DefaultCompression)
	w.Write(data)
	w.Close()
	return float64(len(data)) / float64(b.Len())
}

func TestSourceTextCompressesLikeSourceCode(t *testing.T) {
	v := newVocab(1)
	var all []byte
	for i, ext := range []string{".go", ".c", ".py", ".md", ".go", ".h"} {
		all = append(all, v.source(rng(1, "t", i), ext, 40*kib)...)
	}
	if r := ratio(t, all); r < 3 || r > 4.5 {
		t.Errorf("source text compresses %.2fx, want 3-4.5x", r)
	}
}

func TestBinaryBlocksCompressAboutOneAndAHalf(t *testing.T) {
	b := &blockGen{c: chacha(1, "b", 0), r: rng(1, "b", 0), vocab: newVocab(1)}
	buf := make([]byte, 32*mib)
	b.fill(buf, 0)
	if r := ratio(t, buf); r < 1.3 || r > 1.8 {
		t.Errorf("binary data compresses %.2fx, want 1.3-1.8x", r)
	}
}

func TestChangeOverwritesOneMiBInPlaceAcrossThreeFiles(t *testing.T) {
	dir, _ := generate(t, 1)
	type snap struct {
		ino  uint64
		data []byte
	}
	names, _ := filepath.Glob(filepath.Join(dir, "data", "*"))
	before := map[string]snap{}
	for _, p := range names {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = snap{st.Ino, b}
	}
	changed, err := Change(dir, 99)
	if err != nil {
		t.Fatalf("Change: %v", err)
	}
	if len(changed) != 3 {
		t.Fatalf("changed %d files, want 3", len(changed))
	}
	total := 0
	touched := map[string]ChangedFile{}
	for _, c := range changed {
		total += c.Len
		touched[c.Path] = c
	}
	if total != mib {
		t.Errorf("changed %d bytes, want %d", total, mib)
	}
	for _, p := range names {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		after, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b := before[p]
		if st.Ino != b.ino || len(after) != len(b.data) {
			t.Errorf("%s: inode %d→%d, size %d→%d; want both kept", p, b.ino, st.Ino, len(b.data), len(after))
			continue
		}
		c, ok := touched[p]
		if !ok {
			if !bytes.Equal(after, b.data) {
				t.Errorf("%s changed but is not in Change's list", p)
			}
			continue
		}
		end := c.Offset + int64(c.Len)
		if !bytes.Equal(after[:c.Offset], b.data[:c.Offset]) || !bytes.Equal(after[end:], b.data[end:]) {
			t.Errorf("%s: bytes outside [%d,%d) changed", p, c.Offset, end)
		}
		if bytes.Equal(after[c.Offset:end], b.data[c.Offset:end]) {
			t.Errorf("%s: the changed range holds the old bytes", p)
		}
		if mid := int64(len(after)) / 2; c.Offset > mid || end < mid {
			t.Errorf("%s: change [%d,%d) not in the middle of %d bytes", p, c.Offset, end, len(after))
		}
	}
}

func TestWithFilesScalesTheFileCountNotTheBytes(t *testing.T) {
	base := SmallSpec()
	b, err := Generate(context.Background(), t.TempDir(), 3, base)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Generate(context.Background(), t.TempDir(), 3, base.WithFiles(10*b.Files))
	if err != nil {
		t.Fatal(err)
	}
	if m.Files < 9*b.Files || m.Files > 11*b.Files {
		t.Fatalf("WithFiles(%d): %d files", 10*b.Files, m.Files)
	}
	if m.RealBytes > b.RealBytes*3/2 || m.RealBytes < b.RealBytes*2/3 {
		t.Fatalf("WithFiles changed the real data from %d to %d bytes", b.RealBytes, m.RealBytes)
	}
}

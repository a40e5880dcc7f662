package main

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// Spec sizes a corpus. DefaultSpec is the ~1.5 GB tree the benchmark backs
// up; tests use a scaled-down Spec with the same shape.
type Spec struct {
	// TextFiles is the number of source files (Go, C, Python, Markdown)
	// under src/, each TextMin..TextMax bytes (log-uniform).
	TextFiles        int
	TextMin, TextMax int
	// LooseObjects is the number of zlib-compressed loose objects under
	// src/.git/objects.
	LooseObjects int
	// Packs are the sizes of the pack files under src/.git/objects/pack
	// (zlib-compressed objects, so incompressible).
	Packs []int64
	// BlobTotal bytes of incompressible .gz/.zst-like files under blobs/,
	// each BlobMin..BlobMax bytes.
	BlobTotal        int64
	BlobMin, BlobMax int64
	// Binaries are the sizes of the large mixed-content files under data/
	// (random, fp16-weight-like and database-page-like blocks, ~1.5x
	// compressible).
	Binaries []int64
	// Sparse files under sparse/, each SparseSize bytes apparent with
	// SparseMin..SparseMax bytes of data in 1 MiB-aligned extents.
	Sparse               int
	SparseSize           int64
	SparseMin, SparseMax int64
	// HardlinkGroups source files get one or two more names.
	HardlinkGroups int
	// Symlinks relative symlinks between source files, besides the fixed
	// ones under links/.
	Symlinks int
}

// DefaultSpec is the benchmark corpus: about 1.5 GB of real data in about
// 23,000 files.
func DefaultSpec() Spec {
	return Spec{
		TextFiles: 20000, TextMin: 1 * kib, TextMax: 40 * kib,
		LooseObjects: 2900,
		Packs:        []int64{52 * mib, 47 * mib},
		BlobTotal:    330 * mib, BlobMin: 1 * mib, BlobMax: 20 * mib,
		Binaries: []int64{200 * mib, 190 * mib, 175 * mib, 160 * mib},
		Sparse:   3, SparseSize: 1 << 30, SparseMin: 8 * mib, SparseMax: 30 * mib,
		HardlinkGroups: 40,
		Symlinks:       30,
	}
}

// WithFiles returns s with about n files in all: more (or fewer) source
// files, each smaller (or larger) so that they hold about the same bytes.
// The other kinds of file are unchanged.
func (s Spec) WithFiles(n int) Spec {
	others := s.LooseObjects + len(s.Packs) + len(s.Binaries) + s.Sparse + int(s.BlobTotal/((s.BlobMin+s.BlobMax)/2))
	text := max(n-others, 1)
	scale := float64(s.TextFiles) / float64(text)
	s.TextFiles = text
	s.TextMin = max(64, int(float64(s.TextMin)*scale))
	s.TextMax = max(s.TextMin+64, int(float64(s.TextMax)*scale))
	return s
}

// SmallSpec is a few-MiB corpus with every feature of DefaultSpec, for
// tests and quick runs.
func SmallSpec() Spec {
	return Spec{
		TextFiles: 300, TextMin: 1 * kib, TextMax: 40 * kib,
		LooseObjects: 40,
		Packs:        []int64{1 * mib, 512 * kib},
		BlobTotal:    3 * mib, BlobMin: 256 * kib, BlobMax: 1 * mib,
		Binaries: []int64{3 * mib, 2 * mib, 2 * mib, 1 * mib},
		Sparse:   3, SparseSize: 64 * mib, SparseMin: 1 * mib, SparseMax: 3 * mib,
		HardlinkGroups: 5,
		Symlinks:       5,
	}
}

// CorpusStats describes a generated tree.
type CorpusStats struct {
	Files     int   // names of regular files (hardlinks counted per name)
	Inodes    int   // distinct regular files
	Dirs      int   // directories, the root included
	Symlinks  int   // symbolic links
	RealBytes int64 // bytes in data extents (SEEK_DATA..SEEK_HOLE), each inode once
	Apparent  int64 // sum of file sizes, each inode once
	// ByTop is the real data per top-level directory (src/.git separately).
	ByTop map[string]int64
}

// rng returns the generator for one item of the corpus: every file draws
// from its own stream, so files can be written in parallel and the tree is
// still the same for the same seed.
func rng(seed uint64, kind string, i int) *rand.Rand {
	return rand.New(rand.NewChaCha8(sha256.Sum256(fmt.Appendf(nil, "stead-bench/%d/%s/%d", seed, kind, i))))
}

// chacha returns a raw ChaCha8 stream (fast Read) for one item.
func chacha(seed uint64, kind string, i int) *rand.ChaCha8 {
	return rand.NewChaCha8(sha256.Sum256(fmt.Appendf(nil, "stead-bench-raw/%d/%s/%d", seed, kind, i)))
}

// job writes one file; big ones are queued first.
type job struct {
	size int64
	run  func() error
}

// Generate writes the corpus for seed and spec into dir, which must not
// exist or be empty. The same seed and spec give a byte-identical tree
// (content, sparse layout, modes, xattrs, link targets, hardlink groups and
// modification times).
func Generate(ctx context.Context, dir string, seed uint64, spec Spec) (CorpusStats, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return CorpusStats{}, fmt.Errorf("create corpus dir: %w", err)
	}
	if ents, err := os.ReadDir(dir); err != nil {
		return CorpusStats{}, fmt.Errorf("read corpus dir: %w", err)
	} else if len(ents) > 0 {
		return CorpusStats{}, fmt.Errorf("generate corpus: %s is not empty", dir)
	}
	g := &gen{dir: dir, seed: seed, spec: spec, vocab: newVocab(seed)}
	if err := g.plan(); err != nil {
		return CorpusStats{}, err
	}
	if err := runJobs(ctx, g.jobs); err != nil {
		return CorpusStats{}, err
	}
	if err := g.links(); err != nil {
		return CorpusStats{}, err
	}
	if err := g.odd(); err != nil {
		return CorpusStats{}, err
	}
	if err := setTimes(dir, seed); err != nil {
		return CorpusStats{}, err
	}
	return Measure(ctx, dir)
}

func runJobs(ctx context.Context, jobs []job) error {
	slices.SortStableFunc(jobs, func(a, b job) int {
		switch {
		case a.size > b.size:
			return -1
		case a.size < b.size:
			return 1
		}
		return 0
	})
	ch := make(chan job)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := j.run(); err != nil {
					select {
					case errc <- err:
					default:
					}
					cancel()
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	return ctx.Err()
}

type gen struct {
	dir   string
	seed  uint64
	spec  Spec
	vocab *vocab
	jobs  []job
	texts []string // relative paths of the source files, in plan order
	dirs  []string // relative paths of the source directories
}

func (g *gen) path(rel string) string { return filepath.Join(g.dir, rel) }

func (g *gen) mkdir(rel string, perm os.FileMode) error {
	p := g.path(rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("create dir %s: %w", rel, err)
	}
	if err := os.Chmod(p, perm); err != nil {
		return fmt.Errorf("chmod dir %s: %w", rel, err)
	}
	return nil
}

// plan creates the directories and queues every regular file as a job.
func (g *gen) plan() error {
	r := rng(g.seed, "plan", 0)
	for _, d := range []string{"src", "src/.git", "src/.git/objects", "src/.git/objects/pack", "src/.git/refs",
		"src/.git/refs/heads", "src/.git/refs/tags", "src/.git/info", "src/.git/logs", "blobs", "data", "sparse",
		"links", "links/hard", "odd"} {
		if err := g.mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// Source tree: a random tree of ~1 directory per 12 files, top levels
	// named like a real project.
	top := []string{"cmd", "internal", "pkg", "lib", "src", "tools", "third_party", "docs", "tests", "scripts", "python", "include"}
	for _, t := range top {
		g.dirs = append(g.dirs, filepath.Join("src", t))
	}
	nd := max(len(top), g.spec.TextFiles/12)
	seen := map[string]bool{}
	for len(g.dirs) < nd {
		parent := g.dirs[r.IntN(len(g.dirs))]
		if strings.Count(parent, "/") > 7 {
			continue
		}
		d := filepath.Join(parent, g.vocab.dirName(r))
		if seen[d] {
			continue
		}
		seen[d] = true
		g.dirs = append(g.dirs, d)
	}
	for _, d := range g.dirs {
		if err := g.mkdir(d, 0o755); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	exts := []string{".go", ".go", ".go", ".c", ".h", ".py", ".py", ".md"}
	for i := range g.spec.TextFiles {
		d := g.dirs[r.IntN(len(g.dirs))]
		ext := exts[r.IntN(len(exts))]
		name := filepath.Join(d, g.vocab.fileName(r)+ext)
		for k := 2; names[name]; k++ {
			name = filepath.Join(d, fmt.Sprintf("%s_%d%s", g.vocab.fileName(r), k, ext))
		}
		names[name] = true
		g.texts = append(g.texts, name)
		size := logUniform(r, g.spec.TextMin, g.spec.TextMax)
		rel := name
		g.add(int64(size), func() error {
			tr := rng(g.seed, "text", i)
			return g.writeFile(rel, 0o644, g.vocab.source(tr, ext, size))
		})
	}
	if err := g.git(); err != nil {
		return err
	}
	// Compressed blobs.
	var total int64
	kinds := []string{"release-%03d.tar.gz", "dump-%03d.sql.zst", "logs-%03d.jsonl.gz", "cache-%03d.tar.zst"}
	for i := 0; total < g.spec.BlobTotal; i++ {
		size := g.spec.BlobMin + r.Int64N(g.spec.BlobMax-g.spec.BlobMin+1)
		size = min(size, max(g.spec.BlobTotal-total, g.spec.BlobMin))
		total += size
		rel := filepath.Join("blobs", fmt.Sprintf(kinds[i%len(kinds)], i))
		g.add(size, func() error { return g.writeBlob(rel, i, size) })
	}
	// Large binaries.
	bins := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "state.db", "events.db"}
	for i, size := range g.spec.Binaries {
		name := fmt.Sprintf("bin-%d.bin", i)
		if i < len(bins) {
			name = bins[i]
		}
		rel := filepath.Join("data", name)
		g.add(size, func() error { return g.writeBinary(rel, i, size) })
	}
	// Sparse files.
	for i := range g.spec.Sparse {
		rel := filepath.Join("sparse", fmt.Sprintf("vm-disk-%d.img", i))
		g.add(g.spec.SparseMax, func() error { return g.writeSparse(rel, i) })
	}
	return nil
}

func (g *gen) add(size int64, f func() error) { g.jobs = append(g.jobs, job{size: size, run: f}) }

// logUniform draws from [lo, hi] with a log-uniform distribution (many
// small files, a few large ones, like a real source tree).
func logUniform(r *rand.Rand, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	f := float64(lo) * math.Pow(float64(hi)/float64(lo), r.Float64())
	return min(hi, max(lo, int(f)))
}

func (g *gen) writeFile(rel string, perm os.FileMode, data []byte) error {
	f, err := os.OpenFile(g.path(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", rel, err)
	}
	return nil
}

// writeStream creates rel with size bytes produced by fill, 1 MiB at a time.
func (g *gen) writeStream(rel string, size int64, fill func(p []byte, off int64)) error {
	f, err := os.OpenFile(g.path(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	buf := make([]byte, mib)
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		fill(buf[:n], off)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", rel, err)
		}
		off += n
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", rel, err)
	}
	return nil
}

// writeBlob writes an incompressible file with a gzip or zstd magic.
func (g *gen) writeBlob(rel string, i int, size int64) error {
	c := chacha(g.seed, "blob", i)
	return g.writeStream(rel, size, func(p []byte, off int64) {
		c.Read(p)
		if off == 0 && len(p) >= 4 {
			if strings.HasSuffix(rel, ".gz") {
				copy(p, []byte{0x1f, 0x8b, 0x08, 0x00})
			} else {
				copy(p, []byte{0x28, 0xb5, 0x2f, 0xfd})
			}
		}
	})
}

// writeBinary writes a model-weights/database-like file: 64 KiB blocks,
// half random, some fp16-weight-like (~1.3x compressible), the rest
// database pages (highly compressible but never byte-identical to each
// other, so chunk dedup does not apply).
func (g *gen) writeBinary(rel string, i int, size int64) error {
	c := chacha(g.seed, "binary", i)
	r := rng(g.seed, "binary", i)
	b := &blockGen{c: c, r: r, vocab: g.vocab}
	return g.writeStream(rel, size, b.fill)
}

type blockGen struct {
	c     *rand.ChaCha8
	r     *rand.Rand
	vocab *vocab
	page  uint32
	rowid uint64
	ts    uint64
}

const blockSize = 64 * kib

func (b *blockGen) fill(p []byte, _ int64) {
	for len(p) > 0 {
		n := min(len(p), blockSize)
		blk := p[:n]
		switch x := b.r.IntN(100); {
		case x < 50:
			b.c.Read(blk)
		case x < 65:
			b.weights(blk)
		default:
			b.pages(blk)
		}
		p = p[n:]
	}
}

// weights fills p with fp16 values whose exponents cluster, like trained
// weights: the low byte is random, the high byte carries ~4.5 bits.
func (b *blockGen) weights(p []byte) {
	b.c.Read(p)
	for j := 1; j < len(p); j += 2 {
		u := b.r.Uint32()
		e := byte(11 + (u&3+(u>>2)&1)%4) // exponents 11..14, 12-13 likeliest
		p[j] = byte(u>>8)&0x80 | e<<2 | p[j]&0x03
	}
}

// pages fills p with 4 KiB database pages: a header, fixed-width rows with
// increasing ids and timestamps, a text column, then free space.
func (b *blockGen) pages(p []byte) {
	status := []string{"pending", "running", "done", "failed"}
	for len(p) > 0 {
		n := min(len(p), 4*kib)
		pg := p[:n]
		clear(pg)
		b.page++
		if n >= 16 {
			pg[0] = 0x0d
			binary.LittleEndian.PutUint32(pg[4:], b.page)
		}
		rows := 20 + b.r.IntN(30)
		off := 16
		for range rows {
			if off+64 > n {
				break
			}
			b.rowid++
			b.ts += uint64(1 + b.r.IntN(3000))
			binary.LittleEndian.PutUint64(pg[off:], b.rowid)
			binary.LittleEndian.PutUint64(pg[off+8:], 1_760_000_000_000+b.ts)
			binary.LittleEndian.PutUint32(pg[off+16:], uint32(b.r.IntN(1000)))
			copy(pg[off+20:off+28], status[b.r.IntN(len(status))])
			copy(pg[off+28:off+64], b.vocab.ident(b.r))
			off += 64
		}
		if n >= 16 {
			binary.LittleEndian.PutUint16(pg[8:], uint16(off))
			binary.LittleEndian.PutUint16(pg[10:], uint16(rows))
		}
		p = p[n:]
	}
}

// writeSparse writes a file of SparseSize bytes apparent with 1 MiB-aligned
// data runs of 1-4 MiB at scattered offsets.
func (g *gen) writeSparse(rel string, i int) error {
	r := rng(g.seed, "sparse", i)
	b := &blockGen{c: chacha(g.seed, "sparse", i), r: rng(g.seed, "sparse-data", i), vocab: g.vocab}
	slots := int(g.spec.SparseSize / mib)
	want := int((g.spec.SparseMin + r.Int64N(g.spec.SparseMax-g.spec.SparseMin+1)) / mib)
	used := make([]bool, slots)
	type run struct{ at, n int }
	var runs []run
	for have := 0; have < want; {
		n := min(1+r.IntN(4), want-have)
		at := r.IntN(slots - n + 1)
		free := true
		for k := max(0, at-1); k < min(slots, at+n+1); k++ {
			free = free && !used[k]
		}
		if !free {
			continue
		}
		for k := at; k < at+n; k++ {
			used[k] = true
		}
		runs = append(runs, run{at, n})
		have += n
	}
	slices.SortFunc(runs, func(a, b run) int { return a.at - b.at })
	f, err := os.OpenFile(g.path(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	defer f.Close()
	if err := f.Truncate(g.spec.SparseSize); err != nil {
		return fmt.Errorf("truncate %s: %w", rel, err)
	}
	buf := make([]byte, mib)
	for _, ru := range runs {
		for k := range ru.n {
			b.fill(buf, 0)
			if _, err := f.WriteAt(buf, int64(ru.at+k)*mib); err != nil {
				return fmt.Errorf("write %s: %w", rel, err)
			}
		}
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	return f.Close()
}

// git writes src/.git: small metadata files, loose objects and packs.
func (g *gen) git() error {
	head := hex.EncodeToString(sha1.New().Sum(fmt.Appendf(nil, "%d", g.seed)))[:40]
	small := map[string]string{
		"src/.git/HEAD":            "ref: refs/heads/main\n",
		"src/.git/description":     "Unnamed repository; edit this file 'description' to name the repository.\n",
		"src/.git/config":          "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.invalid/stead/corpus.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n",
		"src/.git/refs/heads/main": head + "\n",
		"src/.git/info/exclude":    "# git ls-files --others --exclude-from=.git/info/exclude\n",
		"src/.git/logs/HEAD":       "0000000000000000000000000000000000000000 " + head + " bench <bench@example.invalid> 1767225600 +0000\tclone: from https://example.invalid/stead/corpus.git\n",
	}
	for rel, s := range small {
		g.add(int64(len(s)), func() error { return g.writeFile(rel, 0o644, []byte(s)) })
	}
	g.add(256*kib, func() error {
		idx := make([]byte, 256*kib)
		chacha(g.seed, "git-index", 0).Read(idx)
		copy(idx, "DIRC\x00\x00\x00\x02")
		return g.writeFile("src/.git/index", 0o644, idx)
	})
	// Loose objects: zlib("blob <n>\x00" + text) at objects/xx/<38 hex>.
	madeDirs := map[string]bool{}
	for i := range g.spec.LooseObjects {
		tr := rng(g.seed, "loose", i)
		size := logUniform(tr, g.spec.TextMin, g.spec.TextMax)
		exts := []string{".go", ".c", ".py"}
		body := g.vocab.source(tr, exts[i%3], size)
		raw := append(fmt.Appendf(nil, "blob %d\x00", len(body)), body...)
		sum := sha1.Sum(raw)
		h := hex.EncodeToString(sum[:])
		d := filepath.Join("src/.git/objects", h[:2])
		if !madeDirs[d] {
			madeDirs[d] = true
			if err := g.mkdir(d, 0o755); err != nil {
				return err
			}
		}
		rel := filepath.Join(d, h[2:])
		g.add(int64(size), func() error {
			var buf bytes.Buffer
			zw := zlib.NewWriter(&buf)
			zw.Write(raw)
			zw.Close()
			return g.writeFile(rel, 0o444, buf.Bytes())
		})
	}
	for i, size := range g.spec.Packs {
		g.add(size, func() error { return g.writePack(i, size) })
	}
	return nil
}

// writePack writes a git-like pack (zlib-compressed text objects) of about
// size bytes and its v2 index.
func (g *gen) writePack(i int, size int64) error {
	r := rng(g.seed, "pack", i)
	var pack bytes.Buffer
	pack.Grow(int(size) + mib)
	pack.WriteString("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	type obj struct {
		sum [20]byte
		off uint64
		crc uint32
	}
	var objs []obj
	exts := []string{".go", ".c", ".py", ".md"}
	zw, _ := zlib.NewWriterLevel(nil, zlib.DefaultCompression)
	for int64(pack.Len()) < size-20 {
		body := g.vocab.source(r, exts[r.IntN(len(exts))], logUniform(r, 512, 64*kib))
		off := pack.Len()
		// type 3 (blob) and size, git's variable-length header.
		n := len(body)
		c := byte(3<<4) | byte(n&0x0f)
		n >>= 4
		for n > 0 {
			pack.WriteByte(c | 0x80)
			c = byte(n & 0x7f)
			n >>= 7
		}
		pack.WriteByte(c)
		zw.Reset(&pack)
		zw.Write(body)
		zw.Close()
		raw := append(fmt.Appendf(nil, "blob %d\x00", len(body)), body...)
		objs = append(objs, obj{sum: sha1.Sum(raw), off: uint64(off), crc: crc32.ChecksumIEEE(pack.Bytes()[off:])})
	}
	b := pack.Bytes()
	binary.BigEndian.PutUint32(b[8:], uint32(len(objs)))
	trailer := sha1.Sum(b)
	pack.Write(trailer[:])
	name := hex.EncodeToString(trailer[:])
	slices.SortFunc(objs, func(a, b obj) int { return bytes.Compare(a.sum[:], b.sum[:]) })
	var idx bytes.Buffer
	idx.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	var fan [256]uint32
	for _, o := range objs {
		for k := int(o.sum[0]); k < 256; k++ {
			fan[k]++
		}
	}
	for _, n := range fan {
		binary.Write(&idx, binary.BigEndian, n)
	}
	for _, o := range objs {
		idx.Write(o.sum[:])
	}
	for _, o := range objs {
		binary.Write(&idx, binary.BigEndian, o.crc)
	}
	for _, o := range objs {
		binary.Write(&idx, binary.BigEndian, uint32(o.off))
	}
	idx.Write(trailer[:])
	isum := sha1.Sum(idx.Bytes())
	idx.Write(isum[:])
	base := filepath.Join("src/.git/objects/pack", "pack-"+name)
	if err := g.writeFile(base+".pack", 0o444, pack.Bytes()); err != nil {
		return err
	}
	return g.writeFile(base+".idx", 0o444, idx.Bytes())
}

// links adds symlinks (relative, absolute, dangling, a loop) and hardlink
// groups of 2-3 names.
func (g *gen) links() error {
	r := rng(g.seed, "links", 0)
	fixed := [][2]string{
		{"links/readme", "../src/README.md"},
		{"links/internal", "../src/internal"},
		{"links/model", "../data/model-00001-of-00002.safetensors"},
		{"links/abs-hostname", "/etc/hostname"},
		{"links/abs-env", "/usr/bin/env"},
		{"links/dangling-rel", "../src/does/not/exist.go"},
		{"links/dangling-abs", "/nonexistent/stead-bench/target"},
		{"links/loop-a", "loop-b"},
		{"links/loop-b", "loop-a"},
		{"src/Current", "internal"},
	}
	if err := g.writeFile("src/README.md", 0o644, g.vocab.source(rng(g.seed, "readme", 0), ".md", 6*kib)); err != nil {
		return err
	}
	for _, l := range fixed {
		if err := os.Symlink(l[1], g.path(l[0])); err != nil {
			return fmt.Errorf("symlink %s: %w", l[0], err)
		}
	}
	for i := range g.spec.Symlinks {
		from := g.texts[r.IntN(len(g.texts))]
		to := g.texts[r.IntN(len(g.texts))]
		t, err := filepath.Rel(filepath.Dir(from), to)
		if err != nil {
			return fmt.Errorf("symlink target: %w", err)
		}
		name := fmt.Sprintf("%s.link%d", strings.TrimSuffix(from, filepath.Ext(from)), i)
		if err := os.Symlink(t, g.path(name)); err != nil {
			return fmt.Errorf("symlink %s: %w", name, err)
		}
	}
	picked := map[int]bool{}
	for i := 0; i < g.spec.HardlinkGroups && len(picked) < len(g.texts); {
		k := r.IntN(len(g.texts))
		if picked[k] {
			continue
		}
		picked[k] = true
		src := g.texts[k]
		names := []string{src + ".orig"}
		if r.IntN(2) == 0 {
			names = append(names, filepath.Join("links/hard", fmt.Sprintf("%03d-%s", i, filepath.Base(src))))
		}
		for _, n := range names {
			if err := os.Link(g.path(src), g.path(n)); err != nil {
				return fmt.Errorf("hardlink %s: %w", n, err)
			}
		}
		i++
	}
	// One large hardlinked pair: a compressed blob under two names.
	blobs, err := filepath.Glob(g.path("blobs/*"))
	if err != nil || len(blobs) == 0 {
		return fmt.Errorf("hardlink blob: no blobs")
	}
	slices.Sort(blobs)
	if err := os.Link(blobs[0], g.path("links/hard/blob-copy"+filepath.Ext(blobs[0]))); err != nil {
		return fmt.Errorf("hardlink blob: %w", err)
	}
	return nil
}

// odd writes the edge cases: odd modes, a setgid, a sticky and a private
// directory, xattrs on files and a directory, a non-UTF-8 name, 200-byte
// names and empty files.
func (g *gen) odd() error {
	r := rng(g.seed, "odd", 0)
	text := func(n int) []byte { return g.vocab.source(r, ".md", n) }
	for _, d := range []struct {
		rel  string
		perm os.FileMode
	}{
		{"odd/shared", 0o775 | os.ModeSetgid},
		{"odd/secret", 0o700},
		{"odd/tmp", 0o777 | os.ModeSticky},
	} {
		if err := g.mkdir(d.rel, d.perm); err != nil {
			return err
		}
	}
	long := func(prefix string) string {
		s := prefix
		for i := 0; len(s) < 200; i++ {
			s += fmt.Sprintf("-%s", g.vocab.ident(r))
		}
		return s[:200]
	}
	longDir := filepath.Join("odd", long("dir"))
	if err := g.mkdir(longDir, 0o755); err != nil {
		return err
	}
	key := make([]byte, 3243)
	chacha(g.seed, "odd-key", 0).Read(key)
	files := []struct {
		rel  string
		perm os.FileMode
		data []byte
	}{
		{"odd/private.key", 0o600, []byte(hex.EncodeToString(key))},
		{"odd/run.sh", 0o755, append([]byte("#!/bin/sh\nset -eu\n"), text(2*kib)...)},
		{"odd/readonly.txt", 0o444, text(3 * kib)},
		{"odd/setuid-like", os.ModeSetuid | 0o755, text(1 * kib)},
		{"odd/shared/notes.md", 0o664, text(5 * kib)},
		{"odd/secret/token", 0o600, []byte(hex.EncodeToString(key[:32]) + "\n")},
		{"odd/tmp/scratch", 0o666, text(1 * kib)},
		{"odd/caf\xe9-r\xe9sum\xe9.txt", 0o644, text(2 * kib)},
		{"odd/\xff\xfe-binary-name", 0o644, text(1 * kib)},
		{filepath.Join("odd", long("file")), 0o644, text(4 * kib)},
		{filepath.Join(longDir, long("nested")), 0o644, text(4 * kib)},
		{"odd/tagged.txt", 0o644, text(7 * kib)},
		{"odd/bigxattr.bin", 0o644, key[:2048]},
		{"odd/empty", 0o644, nil},
		{"odd/shared/empty", 0o644, nil},
		{"src/python/__init__.py", 0o644, nil},
	}
	for _, f := range files {
		if err := g.writeFile(f.rel, f.perm, f.data); err != nil {
			return err
		}
	}
	sum := sha256.Sum256(files[11].data)
	big := make([]byte, 3000)
	chacha(g.seed, "odd-xattr", 0).Read(big)
	xattrs := []struct{ rel, name, val string }{
		{"odd/tagged.txt", "user.origin", "https://example.invalid/tagged.txt"},
		{"odd/tagged.txt", "user.checksum.sha256", hex.EncodeToString(sum[:])},
		{"odd/bigxattr.bin", "user.blob", string(big)},
		{"odd/shared", "user.project", "stead"},
		{"src/README.md", "user.mime_type", "text/markdown"},
		{"data/state.db", "user.db.version", "42"},
	}
	for _, x := range xattrs {
		if err := unix.Lsetxattr(g.path(x.rel), x.name, []byte(x.val), 0); err != nil {
			return fmt.Errorf("set xattr %s on %s: %w", x.name, x.rel, err)
		}
	}
	return nil
}

// setTimes gives every entry a modification (and access) time derived from
// its path, so two generations are identical to the nanosecond.
func setTimes(dir string, seed uint64) error {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := sha256.Sum256(fmt.Appendf(nil, "%d/%s", seed, rel))
		ns := base + int64(binary.LittleEndian.Uint64(h[:])%uint64(300*24*time.Hour))
		ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("set times of %s: %w", rel, err)
		}
		return nil
	})
}

// Measure walks dir and returns its stats; real data is the sum of data
// extents found with SEEK_DATA/SEEK_HOLE, each inode once.
func Measure(ctx context.Context, dir string) (CorpusStats, error) {
	st := CorpusStats{ByTop: map[string]int64{}}
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case d.IsDir():
			st.Dirs++
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			st.Symlinks++
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		st.Files++
		var s unix.Stat_t
		if err := unix.Lstat(p, &s); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if seen[s.Ino] {
			return nil
		}
		seen[s.Ino] = true
		st.Inodes++
		st.Apparent += s.Size
		n, err := dataBytes(p, s.Size)
		if err != nil {
			return err
		}
		st.RealBytes += n
		rel, _ := filepath.Rel(dir, p)
		top, _, _ := strings.Cut(rel, "/")
		if strings.HasPrefix(rel, "src/.git/") {
			top = "src/.git"
		}
		st.ByTop[top] += n
		return nil
	})
	if err != nil {
		return CorpusStats{}, fmt.Errorf("measure %s: %w", dir, err)
	}
	return st, nil
}

// dataBytes sums the data extents of the file at p.
func dataBytes(p string, size int64) (int64, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	var total, off int64
	for off < size {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("seek data %s: %w", p, err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return 0, fmt.Errorf("seek hole %s: %w", p, err)
		}
		end = min(end, size)
		if end <= start {
			break
		}
		total += end - start
		off = end
	}
	return total, nil
}

// ChangedFile is one in-place overwrite done by Change.
type ChangedFile struct {
	Path   string
	Offset int64
	Len    int
}

// Change overwrites 1 MiB in total, in place, in the middle of the first
// three files under dir/data (sorted by name): ~341 KiB each, same inode
// and size, new content drawn from seed.
func Change(dir string, seed uint64) ([]ChangedFile, error) {
	names, err := filepath.Glob(filepath.Join(dir, "data", "*"))
	if err != nil {
		return nil, fmt.Errorf("change corpus: %w", err)
	}
	slices.Sort(names)
	if len(names) < 3 {
		return nil, fmt.Errorf("change corpus: want 3 files under %s/data, have %d", dir, len(names))
	}
	c := chacha(seed, "change", 0)
	var out []ChangedFile
	for i, p := range names[:3] {
		n := mib / 3
		if i == 0 {
			n += mib % 3
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("change %s: %w", p, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("change %s: %w", p, err)
		}
		off := (fi.Size()/2 - int64(n)/2) &^ 4095
		off = max(0, off)
		buf := make([]byte, n)
		c.Read(buf)
		if _, err := f.WriteAt(buf, off); err != nil {
			f.Close()
			return nil, fmt.Errorf("change %s: %w", p, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("change %s: %w", p, err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("change %s: %w", p, err)
		}
		out = append(out, ChangedFile{Path: p, Offset: off, Len: n})
	}
	return out, nil
}

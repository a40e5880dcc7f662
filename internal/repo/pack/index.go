package pack

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/klauspost/compress/zstd"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// MaxDocSize is the largest document plaintext (JSON) that SealDoc writes
// and OpenDoc accepts.
const MaxDocSize = 64 << 20

// IndexLabel is the AAD label sealing index files.
const IndexLabel = "stead index v1"

// IndexFile maps packs to their blobs; it is written after the packs it
// lists.
type IndexFile struct {
	Packs []IndexPack `json:"packs"`
	// Supersedes lists index files this one replaces (written by
	// prune/repack); readers ignore a superseded file.
	Supersedes []seal.ID `json:"supersedes,omitempty"`
}

// IndexPack lists the blobs of one pack and the pack's size in bytes.
type IndexPack struct {
	ID    seal.ID `json:"id"`
	Size  int64   `json:"size"`
	Blobs []Blob  `json:"blobs"`
}

// EncodeIndex validates f (see DecodeIndex) and seals its zstd-compressed
// JSON with AAD IndexLabel. An invalid f is an error wrapping
// errs.ErrInvalid.
func EncodeIndex(c *Codec, f IndexFile) ([]byte, error) {
	if err := validateIndex(f); err != nil {
		return nil, fmt.Errorf("encode index: %v: %w", err, errs.ErrInvalid)
	}
	out, err := SealDoc(c, IndexLabel, f)
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	return out, nil
}

// DecodeIndex opens an index file written by EncodeIndex and validates it:
// no zero ids, no pack listed twice, every blob valid (see ReadHeader) and
// inside its pack's data region without overlap. Failures wrap seal.ErrAuth
// or ErrCorrupt. It never panics.
func DecodeIndex(c *Codec, data []byte) (IndexFile, error) {
	sp := c.getScratch()
	defer c.putScratch(sp)
	comp, err := c.s.Open((*sp)[:0], data, []byte(IndexLabel))
	if err != nil {
		return IndexFile{}, fmt.Errorf("decode index: %w", err)
	}
	*sp = comp
	f, err := c.parseIndex(comp)
	if err != nil {
		return IndexFile{}, fmt.Errorf("decode index: %w", err)
	}
	return f, nil
}

// parseIndex decodes and validates an authenticated index plaintext (a
// zstd frame of JSON). It trusts nothing: a key holder can seal anything.
func (c *Codec) parseIndex(comp []byte) (IndexFile, error) {
	var f IndexFile
	if err := c.parseDoc(comp, &f); err != nil {
		return IndexFile{}, err
	}
	if err := validateIndex(f); err != nil {
		return IndexFile{}, err
	}
	return f, nil
}

// validateIndex checks the invariants DecodeIndex promises; errors wrap
// ErrCorrupt.
func validateIndex(f IndexFile) error {
	for _, id := range f.Supersedes {
		if id.IsZero() {
			return fmt.Errorf("supersedes a zero id: %w", ErrCorrupt)
		}
	}
	seen := make(map[seal.ID]struct{}, len(f.Packs))
	var spans []Blob
	for _, p := range f.Packs {
		if p.ID.IsZero() {
			return fmt.Errorf("pack with zero id: %w", ErrCorrupt)
		}
		if _, dup := seen[p.ID]; dup {
			return fmt.Errorf("pack %s listed twice: %w", p.ID, ErrCorrupt)
		}
		seen[p.ID] = struct{}{}
		if len(p.Blobs) == 0 {
			return fmt.Errorf("pack %s lists no blobs: %w", p.ID, ErrCorrupt)
		}
		// The smallest pack: its blobs, a sealed header, the trailer.
		if p.Size < seal.Overhead+TrailerSize {
			return fmt.Errorf("pack %s: size %d too small: %w", p.ID, p.Size, ErrCorrupt)
		}
		spans = append(spans[:0], p.Blobs...)
		slices.SortFunc(spans, func(a, b Blob) int { return int(int64(a.Offset) - int64(b.Offset)) })
		var end uint64
		for _, b := range spans {
			if err := checkBlob(b); err != nil {
				return fmt.Errorf("pack %s: %w", p.ID, err)
			}
			if uint64(b.Offset) < end {
				return fmt.Errorf("pack %s: blob %s overlaps the one before it: %w", p.ID, b.ID, ErrCorrupt)
			}
			end = uint64(b.Offset) + uint64(b.Length)
			if end > math.MaxUint32 {
				return fmt.Errorf("pack %s: blob %s ends beyond 4 GiB: %w", p.ID, b.ID, ErrCorrupt)
			}
		}
		if end+seal.Overhead+TrailerSize > uint64(p.Size) {
			return fmt.Errorf("pack %s: blobs end at %d beyond data region of a %d-byte pack: %w", p.ID, end, p.Size, ErrCorrupt)
		}
	}
	return nil
}

// SealDoc seals a small JSON document (a manifest, config): the JSON of v,
// zstd-compressed, sealed with AAD label. A document over MaxDocSize is an
// error wrapping errs.ErrInvalid.
func SealDoc(c *Codec, label string, v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("seal document %q: marshal: %w", label, err)
	}
	if len(js) > MaxDocSize {
		return nil, fmt.Errorf("seal document %q: %d bytes exceeds %d: %w", label, len(js), MaxDocSize, errs.ErrInvalid)
	}
	sp := c.getScratch()
	defer c.putScratch(sp)
	comp := c.enc.EncodeAll(js, (*sp)[:0])
	*sp = comp
	return c.s.Seal(make([]byte, 0, len(comp)+seal.Overhead), comp, []byte(label)), nil
}

// OpenDoc reverses SealDoc: it authenticates data with AAD label,
// decompresses it (refusing more than MaxDocSize bytes) and unmarshals the
// JSON into v. Failures wrap seal.ErrAuth or ErrCorrupt. It never panics.
func OpenDoc(c *Codec, label string, data []byte, v any) error {
	sp := c.getScratch()
	defer c.putScratch(sp)
	comp, err := c.s.Open((*sp)[:0], data, []byte(label))
	if err != nil {
		return fmt.Errorf("open document %q: %w", label, err)
	}
	*sp = comp
	if err := c.parseDoc(comp, v); err != nil {
		return fmt.Errorf("open document %q: %w", label, err)
	}
	return nil
}

// parseDoc decompresses an authenticated document plaintext and unmarshals
// its JSON into v.
func (c *Codec) parseDoc(comp []byte, v any) error {
	js, err := c.decompressDoc(comp)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, v); err != nil {
		return fmt.Errorf("unmarshal: %v: %w", err, ErrCorrupt)
	}
	return nil
}

// decompressDoc decompresses one zstd frame that declares its content size,
// of at most MaxDocSize bytes.
func (c *Codec) decompressDoc(comp []byte) ([]byte, error) {
	var h zstd.Header
	if err := h.Decode(comp); err != nil {
		return nil, fmt.Errorf("decompress: bad frame header: %v: %w", err, ErrCorrupt)
	}
	if h.Skippable || !h.HasFCS {
		return nil, fmt.Errorf("decompress: frame does not declare its size: %w", ErrCorrupt)
	}
	if h.FrameContentSize > MaxDocSize {
		return nil, fmt.Errorf("decompress: %d bytes exceeds %d: %w", h.FrameContentSize, MaxDocSize, ErrCorrupt)
	}
	size := int(h.FrameContentSize)
	// WithDecodeAllCapLimit: the decoder never writes past cap.
	out, err := c.dec.DecodeAll(comp, make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("decompress: %v: %w", err, ErrCorrupt)
	}
	if len(out) != size {
		return nil, fmt.Errorf("decompress: got %d bytes, frame declares %d: %w", len(out), size, ErrCorrupt)
	}
	return out, nil
}

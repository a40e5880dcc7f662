package pack

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/zeebo/blake3"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// Pack file layout:
//
//	stored blob 0 || stored blob 1 || ... || sealed header || trailer
//	trailer = uint32 little-endian length of the sealed header || "STP1"
//
// The header is sealed with AAD "stead pack header v1". Its plaintext is
//
//	version byte 1 || uvarint data length || uvarint blob count ||
//	count × (type byte || flags byte || id [32] || uvarint length || uvarint raw length)
//
// where flags bit 0 marks a zstd-compressed blob. Blobs lie back to back
// from offset 0 in header order, so offsets are implied, blobs cannot
// overlap and their lengths must sum to the data length.
const (
	// Magic ends every pack file.
	Magic = "STP1"
	// TrailerSize is the length of the trailer: header length and magic.
	TrailerSize = 8

	headerVersion = 1
	headerAAD     = "stead pack header v1"
	// minEntrySize is the smallest encoded header entry.
	minEntrySize   = 1 + 1 + 32 + 1 + 1
	flagCompressed = 1
)

// Writer builds one pack file in memory: stored blobs back to back, then a
// sealed header listing them and the trailer. A Writer is not safe for
// concurrent use.
type Writer struct {
	c     *Codec
	data  []byte
	blobs []Blob
	err   error
	// maxSize is the largest pack finished so far; it sizes the next
	// buffer after Finish handed the last one out.
	maxSize int
	// spare is a buffer handed back by Recycle.
	spare []byte
}

// NewWriter returns an empty Writer sealing its header with c.
func NewWriter(c *Codec) *Writer {
	return &Writer{c: c}
}

// Add appends one stored blob (as returned by Codec.Encode) and records its
// offset and length. A blob that cannot be recorded (unknown type, stored
// length shorter than seal.Overhead or inconsistent with rawLength, pack
// beyond 4 GiB) makes Finish fail.
func (w *Writer) Add(t BlobType, id seal.ID, stored []byte, rawLength int, compressed bool) {
	if w.err != nil {
		return
	}
	off := len(w.data)
	if w.err = checkAdd(t, id, stored, rawLength, compressed, off); w.err != nil {
		return
	}
	if w.data == nil {
		w.data = w.newBuffer(len(stored))
	}
	w.data = append(w.data, stored...)
	w.blobs = append(w.blobs, Blob{
		Type:       t,
		ID:         id,
		Offset:     uint32(off),
		Length:     uint32(len(stored)),
		RawLength:  uint32(rawLength),
		Compressed: compressed,
	})
}

// checkAdd validates one blob about to be added at offset off.
func checkAdd(t BlobType, id seal.ID, stored []byte, rawLength int, compressed bool, off int) error {
	switch {
	case !t.Valid():
		return fmt.Errorf("add blob %s: unknown type %d: %w", id, t, errs.ErrInvalid)
	case id.IsZero():
		return fmt.Errorf("add blob: zero id: %w", errs.ErrInvalid)
	case len(stored) < seal.Overhead:
		return fmt.Errorf("add blob %s: stored length %d < %d: %w", id, len(stored), seal.Overhead, errs.ErrInvalid)
	case rawLength < 0 || rawLength > MaxBlobSize:
		return fmt.Errorf("add blob %s: raw length %d out of range: %w", id, rawLength, errs.ErrInvalid)
	case !compressed && rawLength+seal.Overhead != len(stored):
		return fmt.Errorf("add blob %s: raw length %d does not match stored length %d: %w", id, rawLength, len(stored), errs.ErrInvalid)
	case uint64(off)+uint64(len(stored)) > math.MaxUint32:
		return fmt.Errorf("add blob %s: pack would exceed 4 GiB: %w", id, errs.ErrInvalid)
	}
	return nil
}

// Len returns the number of blob bytes added so far (the pack's size
// without header and trailer).
func (w *Writer) Len() int { return len(w.data) }

// Count returns the number of blobs added so far.
func (w *Writer) Count() int { return len(w.blobs) }

// Finish returns the complete pack bytes, the pack id (seal.Hash of the
// bytes) and its blobs, and resets the Writer for reuse; the caller owns the
// returned slices. An empty pack, or an earlier Add that failed, is an error
// (wrapping errs.ErrInvalid) and also resets the Writer.
func (w *Writer) Finish() (data []byte, id seal.ID, blobs []Blob, err error) {
	defer w.reset()
	if w.err != nil {
		return nil, seal.ID{}, nil, fmt.Errorf("finish pack: %w", w.err)
	}
	if len(w.blobs) == 0 {
		return nil, seal.ID{}, nil, fmt.Errorf("finish pack: no blobs: %w", errs.ErrInvalid)
	}
	data, err = appendTail(w.c, w.data, w.blobs)
	if err != nil {
		return nil, seal.ID{}, nil, err
	}
	blobs = w.blobs
	w.maxSize = max(w.maxSize, len(data))
	return data, seal.Hash(data), blobs, nil
}

// appendTail appends the sealed header listing blobs, which lie back to
// back in data, and the trailer to data.
func appendTail(c *Codec, data []byte, blobs []Blob) ([]byte, error) {
	return appendTailLen(c, data, len(data), blobs)
}

// appendTailLen appends the sealed header and trailer of a pack whose blob
// region is dataLen bytes long to dst.
func appendTailLen(c *Codec, dst []byte, dataLen int, blobs []Blob) ([]byte, error) {
	hdr := appendHeader(make([]byte, 0, 16+len(blobs)*(minEntrySize+8)), uint64(dataLen), blobs)
	n := len(dst)
	dst = c.s.Seal(dst, hdr, []byte(headerAAD))
	sealedLen := len(dst) - n
	if uint64(sealedLen) > math.MaxUint32 {
		return nil, fmt.Errorf("finish pack: header of %d bytes too large: %w", sealedLen, errs.ErrInvalid)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(sealedLen))
	return append(dst, Magic...), nil
}

// StreamWriter builds one pack file as Writer does, but writes the bytes
// to an io.Writer as blobs are added instead of holding them, and hashes
// them on the way: the pack id is the same seal.Hash of the whole file.
// A StreamWriter is not safe for concurrent use.
type StreamWriter struct {
	c     *Codec
	w     io.Writer
	h     *blake3.Hasher
	n     int
	blobs []Blob
	err   error
}

// NewStreamWriter returns a StreamWriter writing a pack to w, sealing its
// header with c.
func NewStreamWriter(c *Codec, w io.Writer) *StreamWriter {
	return &StreamWriter{c: c, w: w, h: blake3.New()}
}

// Add writes one stored blob (as returned by Codec.Encode) to the pack.
// A blob that cannot be recorded (see Writer.Add) or a failed write is
// returned, and every later Add and Finish fail with it.
func (s *StreamWriter) Add(t BlobType, id seal.ID, stored []byte, rawLength int, compressed bool) error {
	if s.err != nil {
		return s.err
	}
	if s.err = checkAdd(t, id, stored, rawLength, compressed, s.n); s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(stored); err != nil {
		s.err = fmt.Errorf("write pack: %w", err)
		return s.err
	}
	_, _ = s.h.Write(stored)
	s.blobs = append(s.blobs, Blob{Type: t, ID: id, Offset: uint32(s.n), Length: uint32(len(stored)),
		RawLength: uint32(rawLength), Compressed: compressed})
	s.n += len(stored)
	return nil
}

// Len returns the number of blob bytes added so far.
func (s *StreamWriter) Len() int { return s.n }

// Count returns the number of blobs added so far.
func (s *StreamWriter) Count() int { return len(s.blobs) }

// Finish writes the sealed header and the trailer and returns the pack id
// (seal.Hash of every byte written), the pack's size and its blobs. An
// empty pack or an earlier failure is an error. The StreamWriter cannot be
// used afterwards.
func (s *StreamWriter) Finish() (id seal.ID, size int64, blobs []Blob, err error) {
	if s.err != nil {
		return seal.ID{}, 0, nil, fmt.Errorf("finish pack: %w", s.err)
	}
	if len(s.blobs) == 0 {
		return seal.ID{}, 0, nil, fmt.Errorf("finish pack: no blobs: %w", errs.ErrInvalid)
	}
	tail, err := appendTailLen(s.c, nil, s.n, s.blobs)
	if err != nil {
		return seal.ID{}, 0, nil, err
	}
	if _, err := s.w.Write(tail); err != nil {
		s.err = fmt.Errorf("write pack: %w", err)
		return seal.ID{}, 0, nil, s.err
	}
	_, _ = s.h.Write(tail)
	s.h.Sum(id[:0])
	s.err = fmt.Errorf("finish pack: already finished: %w", errs.ErrInvalid)
	return id, int64(s.n + len(tail)), s.blobs, nil
}

// Recycle hands the bytes of a pack returned by Finish back to the Writer
// so a later pack reuses that memory instead of allocating afresh. It is
// optional, and only allowed once nothing else uses data any more (the
// upload finished and no other reference remains): the Writer overwrites
// it.
func (w *Writer) Recycle(data []byte) {
	if cap(data) > cap(w.spare) {
		w.spare = data[:0]
	}
}

// newBuffer returns an empty buffer for a new pack whose first blob is n
// bytes long.
func (w *Writer) newBuffer(n int) []byte {
	want := max(w.maxSize+w.maxSize/8, n+64<<10)
	if cap(w.spare) >= want || (cap(w.spare) >= n && w.maxSize == 0) {
		b := w.spare
		w.spare = nil
		return b
	}
	return make([]byte, 0, want)
}

func (w *Writer) reset() {
	w.data = nil
	w.blobs = nil
	w.err = nil
}

// appendHeader appends the header plaintext for blobs, which lie back to
// back in a data region of dataLen bytes.
func appendHeader(dst []byte, dataLen uint64, blobs []Blob) []byte {
	dst = append(dst, headerVersion)
	dst = binary.AppendUvarint(dst, dataLen)
	dst = binary.AppendUvarint(dst, uint64(len(blobs)))
	for _, b := range blobs {
		var flags byte
		if b.Compressed {
			flags |= flagCompressed
		}
		dst = append(dst, byte(b.Type), flags)
		dst = append(dst, b.ID[:]...)
		dst = binary.AppendUvarint(dst, uint64(b.Length))
		dst = binary.AppendUvarint(dst, uint64(b.RawLength))
	}
	return dst
}

// parseHeader parses and validates a header plaintext, returning its blobs
// (with offsets) and the data region's length. It trusts nothing: a key
// holder can seal any plaintext.
func parseHeader(p []byte) (blobs []Blob, dataLen uint64, err error) {
	bad := func(what string) error {
		return fmt.Errorf("parse pack header: %s: %w", what, ErrCorrupt)
	}
	if len(p) < 1 || p[0] != headerVersion {
		return nil, 0, bad("unknown version")
	}
	p = p[1:]
	dataLen, n := uvarint(p)
	if n <= 0 {
		return nil, 0, bad("bad data length")
	}
	p = p[n:]
	if dataLen > math.MaxUint32 {
		return nil, 0, bad("data length exceeds 4 GiB")
	}
	count, n := uvarint(p)
	if n <= 0 {
		return nil, 0, bad("bad blob count")
	}
	p = p[n:]
	if count == 0 {
		return nil, 0, bad("no blobs")
	}
	if count > uint64(len(p)/minEntrySize) {
		return nil, 0, bad("blob count exceeds header size")
	}
	blobs = make([]Blob, 0, count)
	var off uint64
	for i := uint64(0); i < count; i++ {
		if len(p) < minEntrySize {
			return nil, 0, bad("truncated entry")
		}
		b := Blob{Type: BlobType(p[0])}
		flags := p[1]
		copy(b.ID[:], p[2:34])
		p = p[34:]
		length, n := uvarint(p)
		if n <= 0 {
			return nil, 0, bad("bad blob length")
		}
		p = p[n:]
		raw, n := uvarint(p)
		if n <= 0 {
			return nil, 0, bad("bad raw length")
		}
		p = p[n:]
		if flags&^flagCompressed != 0 {
			return nil, 0, bad("unknown blob flags")
		}
		b.Compressed = flags&flagCompressed != 0
		if length > math.MaxUint32 || raw > MaxBlobSize {
			return nil, 0, bad("blob length out of range")
		}
		b.Offset, b.Length, b.RawLength = uint32(off), uint32(length), uint32(raw)
		if err := checkBlob(b); err != nil {
			return nil, 0, fmt.Errorf("parse pack header: entry %d: %w", i, err)
		}
		off += length
		if off > dataLen {
			return nil, 0, bad("blobs exceed data region")
		}
		blobs = append(blobs, b)
	}
	if len(p) != 0 {
		return nil, 0, bad("trailing bytes")
	}
	if off != dataLen {
		return nil, 0, bad("blobs do not fill data region")
	}
	return blobs, dataLen, nil
}

// uvarint decodes a canonical (shortest) uvarint; n <= 0 on malformed or
// overlong input.
func uvarint(p []byte) (v uint64, n int) {
	v, n = binary.Uvarint(p)
	if n > 1 && p[n-1] == 0 {
		return 0, -1
	}
	return v, n
}

// checkBlob validates one blob's fields on their own (not its placement).
func checkBlob(b Blob) error {
	switch {
	case !b.Type.Valid():
		return fmt.Errorf("blob %s: unknown type %d: %w", b.ID, b.Type, ErrCorrupt)
	case b.ID.IsZero():
		return fmt.Errorf("blob: zero id: %w", ErrCorrupt)
	case b.Length < seal.Overhead:
		return fmt.Errorf("blob %s: stored length %d < %d: %w", b.ID, b.Length, seal.Overhead, ErrCorrupt)
	case b.RawLength > MaxBlobSize:
		return fmt.Errorf("blob %s: raw length %d exceeds %d: %w", b.ID, b.RawLength, MaxBlobSize, ErrCorrupt)
	case !b.Compressed && uint64(b.RawLength)+seal.Overhead != uint64(b.Length):
		return fmt.Errorf("blob %s: raw length %d does not match stored length %d: %w", b.ID, b.RawLength, b.Length, ErrCorrupt)
	}
	return nil
}

// HeaderSpan returns how many bytes at the end of a pack hold its sealed
// header and trailer, read from the trailer (the last TrailerSize bytes of
// the pack). A caller holding only a pack's size can fetch that many tail
// bytes and pass them to ReadHeader.
func HeaderSpan(trailer []byte) (int, error) {
	if len(trailer) < TrailerSize || string(trailer[len(trailer)-4:]) != Magic {
		return 0, fmt.Errorf("read pack trailer: bad magic: %w", ErrCorrupt)
	}
	hl := binary.LittleEndian.Uint32(trailer[len(trailer)-8:])
	if hl < seal.Overhead {
		return 0, fmt.Errorf("read pack trailer: header length %d too short: %w", hl, ErrCorrupt)
	}
	return int(hl) + TrailerSize, nil
}

// ReadHeader authenticates and parses a pack's header. pack is either the
// whole pack file or a tail of it holding at least the sealed header and
// trailer (see HeaderSpan). It checks that every blob lies inside the pack's
// data region without overlap and with a length of at least seal.Overhead.
// Failures wrap ErrCorrupt or seal.ErrAuth. It never panics.
func ReadHeader(c *Codec, pack []byte) ([]Blob, error) {
	span, err := HeaderSpan(pack)
	if err != nil {
		return nil, fmt.Errorf("read pack header: %w", err)
	}
	if span > len(pack) {
		return nil, fmt.Errorf("read pack header: header of %d bytes exceeds the %d bytes given: %w", span, len(pack), ErrCorrupt)
	}
	sealed := pack[len(pack)-span : len(pack)-TrailerSize]
	plain, err := c.s.Open(nil, sealed, []byte(headerAAD))
	if err != nil {
		return nil, fmt.Errorf("read pack header: %w", err)
	}
	blobs, dataLen, err := parseHeader(plain)
	if err != nil {
		return nil, fmt.Errorf("read pack header: %w", err)
	}
	if uint64(len(pack)) > dataLen+uint64(span) {
		return nil, fmt.Errorf("read pack header: %d bytes given, pack is %d: %w", len(pack), dataLen+uint64(span), ErrCorrupt)
	}
	return blobs, nil
}

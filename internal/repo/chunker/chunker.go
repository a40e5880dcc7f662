// Package chunker splits a byte stream into content-defined chunks with
// FastCDC ("FastCDC: a Fast and Efficient Content-Defined Chunking
// Approach", Xia et al., USENIX ATC 2016): a gear rolling hash, cut-point
// skipping below the minimum size and normalized chunking at level 2 (a
// stricter mask before the average size, a looser one after it).
//
// The gear table is derived from a secret seed, so the same content is cut
// at different places under different keys and chunk sizes do not
// fingerprint content across repositories.
package chunker

import (
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/zeebo/blake3"
)

// MaxSize is the largest Params.Max that Validate accepts.
const MaxSize = 64 << 20

// gearContext is the BLAKE3 key-derivation context that expands a seed into
// the gear table.
const gearContext = "stead 2026 chunker v1 gear table"

// Params bounds chunk sizes in bytes. Avg must be a power of two.
type Params struct {
	Min, Avg, Max int
}

// DefaultParams returns Min 128 KiB, Avg 512 KiB, Max 2 MiB.
func DefaultParams() Params {
	return Params{Min: 128 << 10, Avg: 512 << 10, Max: 2 << 20}
}

// Validate checks 64 <= Min < Avg < Max <= MaxSize and that Avg is a power
// of two; a violation is an error wrapping errs.ErrInvalid.
func (p Params) Validate() error {
	switch {
	case p.Min < 64:
		return fmt.Errorf("validate chunker params: min %d < 64: %w", p.Min, errs.ErrInvalid)
	case p.Avg <= p.Min:
		return fmt.Errorf("validate chunker params: avg %d <= min %d: %w", p.Avg, p.Min, errs.ErrInvalid)
	case p.Max <= p.Avg:
		return fmt.Errorf("validate chunker params: max %d <= avg %d: %w", p.Max, p.Avg, errs.ErrInvalid)
	case p.Max > MaxSize:
		return fmt.Errorf("validate chunker params: max %d > %d: %w", p.Max, MaxSize, errs.ErrInvalid)
	case p.Avg&(p.Avg-1) != 0:
		return fmt.Errorf("validate chunker params: avg %d is not a power of two: %w", p.Avg, errs.ErrInvalid)
	}
	return nil
}

// Chunker splits a stream into content-defined chunks. The gear table is
// derived from the seed, so chunk boundaries differ per key. A Chunker is
// not safe for concurrent use.
type Chunker struct {
	r    io.Reader
	p    Params
	gear [256]uint64
	// maskS is used between Min and Avg (more bits: cuts are rarer),
	// maskL between Avg and Max (fewer bits: cuts are likelier). Both
	// select the top bits of the gear hash, which depend on the last 64
	// input bytes.
	maskS, maskL uint64

	buf        []byte
	start, end int  // buf[start:end] is read but not yet returned
	eof        bool // r returned io.EOF
	err        error
	// short reads only as far ahead as the next cut needs (Max bytes),
	// not a whole buffer: for reading a few chunks out of a big file.
	short bool
}

// New returns a Chunker reading r, with a gear table derived from seed.
// Invalid params are an error wrapping errs.ErrInvalid.
func New(r io.Reader, seed [32]byte, p Params) (*Chunker, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("new chunker: %w", err)
	}
	c := &Chunker{p: p}
	h := blake3.NewDeriveKey(gearContext)
	_, _ = h.Write(seed[:])
	var raw [256 * 8]byte
	if _, err := io.ReadFull(h.Digest(), raw[:]); err != nil {
		return nil, fmt.Errorf("new chunker: expand seed: %w", err)
	}
	for i := range c.gear {
		b := raw[i*8 : i*8+8]
		c.gear[i] = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	}
	avgBits := bits.TrailingZeros(uint(p.Avg))
	// Normalization level 2: two bits more before Avg, two fewer after.
	c.maskS = topBits(avgBits + 2)
	c.maskL = topBits(max(avgBits-2, 1))
	// Room for a full Max-sized window plus as much again, so refilling
	// moves at most Max bytes per Max bytes consumed.
	c.buf = make([]byte, 2*p.Max)
	c.Reset(r)
	return c, nil
}

// topBits returns a mask of the n most significant bits of a uint64.
func topBits(n int) uint64 {
	n = min(n, 64)
	return ^uint64(0) << (64 - n)
}

// Reset reuses the chunker (its gear table and its buffer) for a new
// stream.
func (c *Chunker) Reset(r io.Reader) {
	c.r = r
	c.start, c.end = 0, 0
	c.eof = false
	c.err = nil
	c.short = false
}

// ResetShort is Reset for a stream of which only a few chunks will be
// taken: the chunker then reads at most Max bytes ahead of the chunk it
// returns, instead of a whole buffer (the chunks are the same).
func (c *Chunker) ResetShort(r io.Reader) {
	c.Reset(r)
	c.short = true
}

// Next appends the next chunk to dst[:0] and returns it. After the last
// chunk it returns a nil slice and io.EOF; a read error is returned
// (wrapped) once the data read before it has been returned. Chunks are never
// empty and never longer than Max; every chunk but the last is at least Min
// bytes long.
func (c *Chunker) Next(dst []byte) ([]byte, error) {
	if c.end-c.start < c.p.Max && !c.eof && c.err == nil {
		c.fill()
	}
	if c.start == c.end {
		if c.err != nil {
			return nil, c.err
		}
		return nil, io.EOF
	}
	data := c.buf[c.start:c.end]
	n := c.cut(data)
	c.start += n
	return append(dst[:0], data[:n]...), nil
}

// fill reads until the buffer is full or the input ends, first moving the
// unreturned bytes to the front if fewer than Max bytes of room remain.
func (c *Chunker) fill() {
	if len(c.buf)-c.start < c.p.Max {
		c.end = copy(c.buf, c.buf[c.start:c.end])
		c.start = 0
	}
	empty := 0
	for c.end < len(c.buf) {
		lim := len(c.buf)
		if c.short {
			if lim = min(lim, c.start+c.p.Max); c.end >= lim {
				return
			}
		}
		n, err := c.r.Read(c.buf[c.end:lim])
		c.end += n
		switch {
		case errors.Is(err, io.EOF):
			c.eof = true
			return
		case err != nil:
			c.err = fmt.Errorf("read chunker input: %w", err)
			return
		case n == 0:
			empty++
			if empty >= 100 {
				c.err = fmt.Errorf("read chunker input: %w", io.ErrNoProgress)
				return
			}
		default:
			empty = 0
		}
	}
}

// cut returns the length of the chunk starting at data[0]: the first cut
// point of the gear hash after Min, or min(len(data), Max). data holds at
// least Max bytes unless the input ends within it.
func (c *Chunker) cut(data []byte) int {
	n := len(data)
	if n <= c.p.Min {
		return n
	}
	n = min(n, c.p.Max)
	normal := min(c.p.Avg, n)
	gear := &c.gear
	var fp uint64
	maskS, maskL := c.maskS, c.maskL
	// The hash starts afresh at Min: bytes before it cannot end a chunk.
	for i, b := range data[c.p.Min:normal] {
		fp = fp<<1 + gear[b]
		if fp&maskS == 0 {
			return c.p.Min + i + 1
		}
	}
	for i, b := range data[normal:n] {
		fp = fp<<1 + gear[b]
		if fp&maskL == 0 {
			return normal + i + 1
		}
	}
	return n
}

package pack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/seal"
)

func TestPackRoundTrip(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	w := NewWriter(c)
	in := smallPackBlobs()
	data, id, blobs := buildPack(t, c, w, in)
	if id != seal.Hash(data) {
		t.Fatal("pack id is not the hash of its bytes")
	}
	if string(data[len(data)-4:]) != Magic {
		t.Fatal("pack does not end in magic")
	}
	got, err := ReadHeader(c, data)
	if err != nil {
		t.Fatalf("ReadHeader: %v", err)
	}
	if len(got) != len(in) || len(blobs) != len(in) {
		t.Fatalf("header lists %d blobs, Finish %d, want %d", len(got), len(blobs), len(in))
	}
	for i, b := range got {
		if b != blobs[i] {
			t.Fatalf("blob %d: header %+v, Finish %+v", i, b, blobs[i])
		}
		plain, err := c.Decode(nil, b, data[b.Offset:b.Offset+b.Length])
		if err != nil {
			t.Fatalf("Decode blob %d: %v", i, err)
		}
		if !bytes.Equal(plain, in[i].plain) || b.Type != in[i].t {
			t.Fatalf("blob %d roundtrip mismatch", i)
		}
	}
}

func TestReadHeaderAcceptsAnyTailHoldingTheHeader(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	data, _, blobs := buildPack(t, c, NewWriter(c), smallPackBlobs())
	span, err := HeaderSpan(data[len(data)-TrailerSize:])
	if err != nil {
		t.Fatal(err)
	}
	for n := span; n <= len(data); n++ {
		got, err := ReadHeader(c, data[len(data)-n:])
		if err != nil {
			t.Fatalf("tail of %d bytes: %v", n, err)
		}
		if len(got) != len(blobs) {
			t.Fatalf("tail of %d bytes: %d blobs", n, len(got))
		}
	}
	// A tail shorter than the header is not enough.
	if _, err := ReadHeader(c, data[len(data)-span+1:]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short tail: err = %v, want ErrCorrupt", err)
	}
	// Bytes before the pack are not part of it.
	if _, err := ReadHeader(c, append([]byte{0}, data...)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("extended pack: err = %v, want ErrCorrupt", err)
	}
}

func TestWriterIsReusableAfterFinish(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	w := NewWriter(c)
	d1, id1, _ := buildPack(t, c, w, smallPackBlobs())
	if w.Len() != 0 || w.Count() != 0 {
		t.Fatalf("after Finish: Len %d Count %d", w.Len(), w.Count())
	}
	d2, id2, b2 := buildPack(t, c, w, smallPackBlobs()[:2])
	if id1 == id2 || len(b2) != 2 {
		t.Fatal("second pack equals the first")
	}
	if _, err := ReadHeader(c, d1); err != nil {
		t.Fatalf("first pack changed by reuse: %v", err)
	}
	if _, err := ReadHeader(c, d2); err != nil {
		t.Fatal(err)
	}
}

func TestWriterCountsAndLength(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	w := NewWriter(c)
	total := 0
	for i, b := range smallPackBlobs() {
		id := c.Sealer().ID(b.plain)
		stored, comp := c.Encode(nil, b.t, id, b.plain)
		w.Add(b.t, id, stored, len(b.plain), comp)
		total += len(stored)
		if w.Count() != i+1 || w.Len() != total {
			t.Fatalf("after %d adds: Count %d Len %d, want %d", i+1, w.Count(), w.Len(), total)
		}
	}
}

func TestFinishRejectsEmptyPackAndBadAdds(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	w := NewWriter(c)
	if _, _, _, err := w.Finish(); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("empty pack: err = %v, want ErrInvalid", err)
	}
	good := bytes.Repeat([]byte{1}, 40)
	id := seal.Hash([]byte("x"))
	for name, add := range map[string]func(){
		"unknown type":    func() { w.Add(9, id, good, 40-seal.Overhead, false) },
		"zero id":         func() { w.Add(DataBlob, seal.ID{}, good, 40-seal.Overhead, false) },
		"short stored":    func() { w.Add(DataBlob, id, good[:seal.Overhead-1], 0, true) },
		"raw mismatch":    func() { w.Add(DataBlob, id, good, 5, false) },
		"negative raw":    func() { w.Add(DataBlob, id, good, -1, true) },
		"huge raw length": func() { w.Add(DataBlob, id, good, MaxBlobSize+1, true) },
	} {
		w.Add(DataBlob, id, good, 40-seal.Overhead, false)
		add()
		if _, _, _, err := w.Finish(); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		if w.Count() != 0 {
			t.Errorf("%s: writer not reset after failed Finish", name)
		}
	}
}

// Every single-bit flip anywhere in a pack is caught by ReadHeader or by
// decoding the blobs it lists.
func TestEveryBitFlipOfAPackIsDetected(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	data, _, _ := buildPack(t, c, NewWriter(c), smallPackBlobs())
	for i := 0; i < len(data)*8; i++ {
		bad := bytes.Clone(data)
		bad[i/8] ^= 1 << (i % 8)
		blobs, err := ReadHeader(c, bad)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, seal.ErrAuth) {
				t.Fatalf("bit %d: err = %v", i, err)
			}
			continue
		}
		detected := false
		for _, b := range blobs {
			if _, err := c.Decode(nil, b, bad[b.Offset:b.Offset+b.Length]); err != nil {
				if !errors.Is(err, seal.ErrAuth) {
					t.Fatalf("bit %d: blob err = %v, want ErrAuth", i, err)
				}
				detected = true
			}
		}
		if !detected {
			t.Fatalf("flip of bit %d went undetected", i)
		}
	}
}

func TestTruncatedPacksAreRejected(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	data, _, _ := buildPack(t, c, NewWriter(c), smallPackBlobs())
	for n := 0; n < len(data); n++ {
		if _, err := ReadHeader(c, data[:n]); !errors.Is(err, ErrCorrupt) && !errors.Is(err, seal.ErrAuth) {
			t.Fatalf("pack truncated to %d of %d bytes: err = %v", n, len(data), err)
		}
	}
}

func TestReadHeaderRejectsWrongKey(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	data, _, _ := buildPack(t, c, NewWriter(c), smallPackBlobs())
	if _, err := ReadHeader(newCodec(t, seal.Key{2}), data); !errors.Is(err, seal.ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
}

// A key holder can seal any header; its contents are still validated.
func TestReadHeaderRejectsAuthenticatedButInvalidHeaders(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	id := seal.Hash([]byte("x"))
	mk := func(dataLen uint64, blobs []Blob) []byte {
		hdr := appendHeader(nil, dataLen, blobs)
		p := c.Sealer().Seal(make([]byte, dataLen), hdr, []byte(headerAAD))
		p = binary.LittleEndian.AppendUint32(p, uint32(len(p)-int(dataLen)))
		return append(p, Magic...)
	}
	ok := Blob{Type: DataBlob, ID: id, Length: 40, RawLength: 40 - seal.Overhead}
	if _, err := ReadHeader(c, mk(40, []Blob{ok})); err != nil {
		t.Fatalf("valid crafted header: %v", err)
	}
	for name, tc := range map[string]struct {
		dataLen uint64
		blobs   []Blob
	}{
		"no blobs":          {0, nil},
		"blob beyond data":  {39, []Blob{ok}},
		"data beyond blobs": {41, []Blob{ok}},
		"zero id":           {40, []Blob{{Type: DataBlob, Length: 40, RawLength: 12}}},
		"unknown type":      {40, []Blob{{Type: 0, ID: id, Length: 40, RawLength: 12}}},
		"short blob":        {20, []Blob{{Type: DataBlob, ID: id, Length: 20, RawLength: 0, Compressed: true}}},
		"raw mismatch":      {40, []Blob{{Type: DataBlob, ID: id, Length: 40, RawLength: 11}}},
		"huge raw":          {40, []Blob{{Type: DataBlob, ID: id, Length: 40, RawLength: MaxBlobSize + 1, Compressed: true}}},
	} {
		if _, err := ReadHeader(c, mk(tc.dataLen, tc.blobs)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzReadHeader(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	w := NewWriter(c)
	data, _, _ := buildPack(f, c, w, smallPackBlobs())
	f.Add(data)
	span, _ := HeaderSpan(data)
	f.Add(data[len(data)-span:])
	one, _, _ := buildPack(f, c, w, smallPackBlobs()[:1])
	f.Add(one)
	f.Add([]byte(Magic))
	f.Add([]byte("\x1c\x00\x00\x00STP1"))
	f.Fuzz(func(t *testing.T, pack []byte) {
		blobs, err := ReadHeader(c, pack)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, seal.ErrAuth) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrAuth", err)
			}
			return
		}
		checkBlobsTile(t, blobs)
	})
}

// checkBlobsTile checks that blobs lie back to back from offset 0.
func checkBlobsTile(t *testing.T, blobs []Blob) {
	t.Helper()
	var off uint64
	for _, b := range blobs {
		if uint64(b.Offset) != off || b.Length < seal.Overhead || checkBlob(b) != nil {
			t.Fatalf("accepted bad blob %+v", b)
		}
		off += uint64(b.Length)
	}
}

// FuzzParseHeader fuzzes the header parser behind authentication: a key
// holder can seal any plaintext.
func FuzzParseHeader(f *testing.F) {
	id := seal.Hash([]byte("x"))
	f.Add(appendHeader(nil, 40, []Blob{{Type: DataBlob, ID: id, Length: 40, RawLength: 12}}))
	f.Add(appendHeader(nil, 140, []Blob{
		{Type: DataBlob, ID: id, Length: 40, RawLength: 12},
		{Type: TreeBlob, ID: id, Length: 100, RawLength: 1000, Compressed: true},
	}))
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, p []byte) {
		blobs, dataLen, err := parseHeader(p)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		checkBlobsTile(t, blobs)
		last := blobs[len(blobs)-1]
		if uint64(last.Offset)+uint64(last.Length) != dataLen {
			t.Fatal("blobs do not fill the data region")
		}
		// The encoding is canonical: re-encoding gives the input back.
		if !bytes.Equal(appendHeader(nil, dataLen, blobs), p) {
			t.Fatal("header does not re-encode to itself")
		}
	})
}

func BenchmarkWriterFinishAndReadHeader(b *testing.B) {
	c := newCodec(b, seal.Key{1})
	w := NewWriter(c)
	plain := randomBytes(1, 512<<10)
	id := c.Sealer().ID(plain)
	stored, comp := c.Encode(nil, DataBlob, id, plain)
	b.SetBytes(32 * int64(len(stored)))
	for b.Loop() {
		for range 32 {
			w.Add(DataBlob, id, stored, len(plain), comp)
		}
		data, _, _, err := w.Finish()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ReadHeader(c, data); err != nil {
			b.Fatal(err)
		}
		w.Recycle(data)
	}
}

func TestRecycledBufferIsReusedForTheNextPack(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	w := NewWriter(c)
	d1, _, _ := buildPack(t, c, w, smallPackBlobs())
	w.Recycle(d1)
	d2, id2, _ := buildPack(t, c, w, smallPackBlobs()[1:])
	if &d1[:1][0] != &d2[:1][0] {
		t.Fatal("the recycled buffer was not reused")
	}
	if seal.Hash(d2) != id2 {
		t.Fatal("pack built in a recycled buffer does not match its id")
	}
	if _, err := ReadHeader(c, d2); err != nil {
		t.Fatal(err)
	}
}

func TestStreamWriterWritesTheSamePackAsWriterNamedByItsHash(t *testing.T) {
	c := newCodec(t, seal.Key{7})
	var file bytes.Buffer
	sw := NewStreamWriter(c, &file)
	var want []Blob
	w := NewWriter(c)
	for _, b := range smallPackBlobs() {
		id := c.Sealer().ID(b.plain)
		stored, compressed := c.Encode(nil, b.t, id, b.plain)
		if err := sw.Add(b.t, id, stored, len(b.plain), compressed); err != nil {
			t.Fatalf("Add: %v", err)
		}
		w.Add(b.t, id, stored, len(b.plain), compressed)
	}
	id, size, blobs, err := sw.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	data := file.Bytes()
	if size != int64(len(data)) || id != seal.Hash(data) {
		t.Fatalf("Finish = size %d id %s; the bytes written are %d long, hash %s", size, id, len(data), seal.Hash(data))
	}
	mem, _, want, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blobs, want) || len(mem) != len(data) {
		t.Fatalf("stream pack blobs %v (%d bytes), in-memory pack %v (%d bytes)", blobs, len(data), want, len(mem))
	}
	got, err := ReadHeader(c, data)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ReadHeader of the streamed pack = %v, %v; want %v", got, err, want)
	}
	for _, b := range got {
		plain, err := c.Decode(nil, b, data[b.Offset:b.Offset+b.Length])
		if err != nil || c.Sealer().ID(plain) != b.ID {
			t.Fatalf("blob %s of the streamed pack: %v", b.ID, err)
		}
	}
	if _, _, _, err := sw.Finish(); err == nil {
		t.Fatal("a second Finish succeeded")
	}
}

func TestStreamWriterFailsOnAWriteErrorAndOnABadBlob(t *testing.T) {
	c := newCodec(t, seal.Key{7})
	sw := NewStreamWriter(c, failWriter{})
	plain := textBytes(1000)
	id := c.Sealer().ID(plain)
	stored, compressed := c.Encode(nil, DataBlob, id, plain)
	if err := sw.Add(DataBlob, id, stored, len(plain), compressed); err == nil {
		t.Fatal("Add through a failing writer succeeded")
	}
	if _, _, _, err := sw.Finish(); err == nil {
		t.Fatal("Finish after a failed Add succeeded")
	}
	sw = NewStreamWriter(c, io.Discard)
	if err := sw.Add(DataBlob, seal.ID{}, stored, len(plain), compressed); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Add with a zero id: %v, want ErrInvalid", err)
	}
	if _, _, _, err := NewStreamWriter(c, io.Discard).Finish(); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Finish of an empty pack: %v, want ErrInvalid", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

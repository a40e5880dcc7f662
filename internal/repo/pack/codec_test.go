package pack

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stead-dev/stead/internal/repo/seal"
)

func encodeBlob(c *Codec, t BlobType, plain []byte) (Blob, []byte) {
	id := c.Sealer().ID(plain)
	stored, compressed := c.Encode(nil, t, id, plain)
	return Blob{Type: t, ID: id, Length: uint32(len(stored)), RawLength: uint32(len(plain)), Compressed: compressed}, stored
}

func TestCodecRoundTripCompressesOnlyWhenItPays(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	for _, tc := range []struct {
		name     string
		plain    []byte
		compress bool
	}{
		{"empty", nil, false},
		{"one byte", []byte{7}, false},
		{"random", randomBytes(2, 1<<20), false},
		{"text", textBytes(1 << 20), true},
		{"zeros", make([]byte, 4<<20), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, stored := encodeBlob(c, DataBlob, tc.plain)
			if b.Compressed != tc.compress {
				t.Fatalf("compressed = %v, want %v", b.Compressed, tc.compress)
			}
			if len(stored) > StoredSize(len(tc.plain)) {
				t.Fatalf("stored %d bytes > StoredSize %d", len(stored), StoredSize(len(tc.plain)))
			}
			got, err := c.Decode([]byte("pre"), b, stored)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if string(got[:3]) != "pre" || !bytes.Equal(got[3:], tc.plain) {
				t.Fatal("Decode returned other bytes")
			}
			// A roomy dst is reused.
			dst := make([]byte, 0, len(tc.plain)+10)
			got, err = c.Decode(dst, b, stored)
			if err != nil || !bytes.Equal(got, tc.plain) {
				t.Fatalf("Decode into roomy dst: %v", err)
			}
		})
	}
}

func TestDecodeRejectsSwappedOrRelabelledBlobs(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	a, storedA := encodeBlob(c, DataBlob, textBytes(5000))
	b, storedB := encodeBlob(c, DataBlob, textBytes(6000))
	r, storedR := encodeBlob(c, DataBlob, randomBytes(1, 500))
	if !a.Compressed || r.Compressed {
		t.Fatal("test setup: want a compressed, r raw")
	}

	// Blob b's location pointing at a's bytes.
	swapped := b
	swapped.Length = a.Length
	swapped.RawLength = a.RawLength
	if _, err := c.Decode(nil, swapped, storedA); !errors.Is(err, seal.ErrAuth) {
		t.Errorf("swapped blob: err = %v, want ErrAuth", err)
	}
	_ = storedB
	for name, mut := range map[string]func(*Blob){
		"type changed":    func(x *Blob) { x.Type = TreeBlob },
		"id changed":      func(x *Blob) { x.ID[0] ^= 1 },
		"flag changed":    func(x *Blob) { x.Compressed = !x.Compressed },
		"raw length +1":   func(x *Blob) { x.RawLength++ },
		"length changed":  func(x *Blob) { x.Length-- },
		"unknown type":    func(x *Blob) { x.Type = 3 },
		"huge raw length": func(x *Blob) { x.RawLength = MaxBlobSize + 1 },
	} {
		for _, base := range []struct {
			b      Blob
			stored []byte
		}{{a, storedA}, {r, storedR}} {
			bb := base.b
			mut(&bb)
			_, err := c.Decode(nil, bb, base.stored)
			if !errors.Is(err, seal.ErrAuth) && !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s (compressed=%v): err = %v, want ErrAuth or ErrCorrupt", name, base.b.Compressed, err)
			}
		}
	}
	other := newCodec(t, seal.Key{2})
	if _, err := other.Decode(nil, a, storedA); !errors.Is(err, seal.ErrAuth) {
		t.Errorf("wrong key: err = %v, want ErrAuth", err)
	}
}

func TestDecodeRejectsEveryBitFlipOfStoredBytes(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	b, stored := encodeBlob(c, TreeBlob, textBytes(200))
	for i := 0; i < len(stored)*8; i++ {
		bad := bytes.Clone(stored)
		bad[i/8] ^= 1 << (i % 8)
		if _, err := c.Decode(nil, b, bad); !errors.Is(err, seal.ErrAuth) {
			t.Fatalf("bit %d: err = %v, want ErrAuth", i, err)
		}
	}
}

// A key holder can seal anything; the checks after authentication must
// still hold.
func TestDecodeRejectsAuthenticatedButInconsistentPlaintext(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	seal1 := func(b Blob, body []byte) []byte {
		aad := blobAAD(b.Type, b.ID, b.Compressed)
		return c.Sealer().Seal(nil, body, aad[:])
	}
	plain := textBytes(1000)
	id := c.Sealer().ID(plain)

	// Raw blob whose content does not hash to its id.
	b := Blob{Type: DataBlob, ID: id, Length: uint32(len(plain) + seal.Overhead), RawLength: uint32(len(plain))}
	other := bytes.Clone(plain)
	other[0] ^= 1
	if _, err := c.Decode(nil, b, seal1(b, other)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("wrong content: err = %v, want ErrCorrupt", err)
	}

	// Compressed blob that inflates past its RawLength (a bomb).
	bomb := zstdBytes(t, make([]byte, 64<<20))
	b = Blob{Type: DataBlob, ID: id, Length: uint32(len(bomb) + seal.Overhead), RawLength: 1000, Compressed: true}
	if _, err := c.Decode(nil, b, seal1(b, bomb)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bomb: err = %v, want ErrCorrupt", err)
	}
	// Same without a declared content size.
	bomb = zstdStream(t, make([]byte, 8<<20))
	b.Length = uint32(len(bomb) + seal.Overhead)
	if _, err := c.Decode(nil, b, seal1(b, bomb)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bomb without size: err = %v, want ErrCorrupt", err)
	}

	// Compressed blob that is not zstd, or is shorter than RawLength.
	for name, body := range map[string][]byte{
		"garbage": []byte("not a zstd frame"),
		"short":   zstdBytes(t, plain[:999]),
		"empty":   nil,
	} {
		b = Blob{Type: DataBlob, ID: id, Length: uint32(len(body) + seal.Overhead), RawLength: 1000, Compressed: true}
		if _, err := c.Decode(nil, b, seal1(b, body)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func zstdBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// zstdStream compresses b as a frame without a content size.
func zstdStream(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	var h zstd.Header
	if err := h.Decode(buf.Bytes()); err != nil || h.HasFCS {
		t.Fatalf("stream frame declares its size (%v)", err)
	}
	return buf.Bytes()
}

func TestCodecIsSafeForConcurrentUse(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	inputs := [][]byte{textBytes(100000), randomBytes(3, 70000), textBytes(10)}
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 50; i++ {
				p := inputs[(g+i)%len(inputs)]
				b, stored := encodeBlob(c, DataBlob, p)
				got, err := c.Decode(nil, b, stored)
				if err == nil && !bytes.Equal(got, p) {
					err = errors.New("roundtrip mismatch")
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzDecodeBlob(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	for _, p := range [][]byte{nil, []byte("x"), textBytes(3000), randomBytes(1, 200)} {
		b, stored := encodeBlob(c, DataBlob, p)
		f.Add(uint8(b.Type), b.ID[:], b.Length, b.RawLength, b.Compressed, stored)
	}
	f.Fuzz(func(t *testing.T, typ uint8, id []byte, length, raw uint32, compressed bool, stored []byte) {
		b := Blob{Type: BlobType(typ), Length: length, RawLength: raw, Compressed: compressed}
		copy(b.ID[:], id)
		got, err := c.Decode([]byte("pre"), b, stored)
		if err != nil {
			if !errors.Is(err, seal.ErrAuth) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v wraps neither ErrAuth nor ErrCorrupt", err)
			}
			if string(got) != "pre" {
				t.Fatal("dst changed on error")
			}
			return
		}
		if c.Sealer().ID(got[3:]) != b.ID || len(got)-3 != int(raw) {
			t.Fatal("Decode accepted a plaintext that does not match its blob")
		}
	})
}

// FuzzDecompressBlob fuzzes what follows authentication: a key holder can
// seal any bytes as a compressed blob.
func FuzzDecompressBlob(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	plain := textBytes(3000)
	f.Add(uint32(3000), c.enc.EncodeAll(plain, nil))
	f.Add(uint32(10), c.enc.EncodeAll(plain, nil))
	f.Add(uint32(0), []byte{})
	f.Fuzz(func(t *testing.T, raw uint32, comp []byte) {
		b := Blob{Type: DataBlob, ID: c.Sealer().ID(plain), RawLength: raw, Compressed: true}
		got, err := c.decompressBlob(nil, b, comp)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(got, plain) {
			t.Fatal("accepted other plaintext")
		}
	})
}

func benchCodec(b *testing.B, plain []byte) {
	c := newCodec(b, seal.Key{1})
	id := c.Sealer().ID(plain)
	dst := make([]byte, 0, StoredSize(len(plain)))
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			c.Encode(dst[:0], DataBlob, id, plain)
		}
	})
	stored, compressed := c.Encode(nil, DataBlob, id, plain)
	blob := Blob{Type: DataBlob, ID: id, Length: uint32(len(stored)), RawLength: uint32(len(plain)), Compressed: compressed}
	b.Run("decode", func(b *testing.B) {
		// As callers do: one buffer, grown by Decode as it needs.
		var out []byte
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			var err error
			if out, err = c.Decode(out[:0], blob, stored); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode-parallel", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]byte, 0, StoredSize(len(plain)))
			for pb.Next() {
				c.Encode(dst[:0], DataBlob, id, plain)
			}
		})
	})
}

func BenchmarkCodecRandom512K(b *testing.B) { benchCodec(b, randomBytes(1, 512<<10)) }

func BenchmarkCodecText512K(b *testing.B) { benchCodec(b, textBytes(512<<10)) }

// BenchmarkCodecMixed64K is a chunk of a typical size (a small file's
// whole content) that compresses about as well as the bench corpus's data
// (1.4x): 4 KiB pieces of random bytes and of text, alternately.
func BenchmarkCodecMixed64K(b *testing.B) { benchCodec(b, mixedBytes(64<<10)) }

func mixedBytes(n int) []byte {
	out := make([]byte, 0, n)
	for i := 0; len(out) < n; i++ {
		if i%2 == 0 {
			out = append(out, randomBytes(uint64(i), 4096)...)
		} else {
			out = append(out, textBytes(4096)...)
		}
	}
	return out[:n]
}

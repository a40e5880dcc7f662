package pack

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stead-dev/stead/internal/repo/seal"
)

func newCodec(t testing.TB, k seal.Key) *Codec {
	t.Helper()
	s, err := seal.NewSealer(k)
	if err != nil {
		t.Fatalf("NewSealer: %v", err)
	}
	c, err := NewCodec(s)
	if err != nil {
		t.Fatalf("NewCodec: %v", err)
	}
	return c
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func textBytes(n int) []byte {
	return bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog. "), n/45+1)[:n]
}

type testBlob struct {
	t     BlobType
	plain []byte
}

// buildPack encodes plaintexts into one pack and returns it, its id and
// blobs.
func buildPack(t testing.TB, c *Codec, w *Writer, blobs []testBlob) ([]byte, seal.ID, []Blob) {
	t.Helper()
	for _, b := range blobs {
		id := c.Sealer().ID(b.plain)
		stored, compressed := c.Encode(nil, b.t, id, b.plain)
		w.Add(b.t, id, stored, len(b.plain), compressed)
	}
	data, id, got, err := w.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return data, id, got
}

func smallPackBlobs() []testBlob {
	return []testBlob{
		{DataBlob, randomBytes(1, 100)},
		{TreeBlob, textBytes(300)},
		{DataBlob, nil},
		{DataBlob, []byte("x")},
	}
}

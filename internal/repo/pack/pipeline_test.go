package pack

import (
	"bytes"
	"io"
	"testing"

	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// BenchmarkPipeline measures one goroutine doing what a push does per byte:
// chunk, name (keyed BLAKE3), compress-or-not and seal, pack (16 MiB packs,
// pack id hash). Random input is the worst case: nothing compresses.
func BenchmarkPipeline(b *testing.B) {
	for name, data := range map[string][]byte{
		"random": randomBytes(5, 64<<20),
		"text":   textBytes(64 << 20),
	} {
		b.Run(name, func(b *testing.B) {
			c := newCodec(b, seal.Key{1})
			ch, err := chunker.New(bytes.NewReader(nil), c.Sealer().ChunkerSeed(), chunker.DefaultParams())
			if err != nil {
				b.Fatal(err)
			}
			w := NewWriter(c)
			var chunk, stored []byte
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				ch.Reset(bytes.NewReader(data))
				for {
					chunk, err = ch.Next(chunk)
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					id := c.Sealer().ID(chunk)
					var comp bool
					stored, comp = c.Encode(stored[:0], DataBlob, id, chunk)
					w.Add(DataBlob, id, stored, len(chunk), comp)
					if w.Len() >= 16<<20 {
						if _, _, _, err := w.Finish(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if w.Count() > 0 {
					if _, _, _, err := w.Finish(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

package pack

import (
	"bytes"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/repo/chunker"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// BenchmarkPipeline measures one goroutine doing what a push does per byte:
// chunk, name (keyed BLAKE3), compress-or-not and seal, pack (16 MiB packs,
// pack id hash). Random input is the worst case: nothing compresses.
// Besides wall-clock MB/s it reports MB per CPU-second of the whole process
// (GC included), which stays meaningful on a loaded machine.
func BenchmarkPipeline(b *testing.B) {
	for _, tc := range []struct {
		name    string
		data    []byte
		recycle bool
	}{
		{"random", randomBytes(5, 64<<20), false},
		{"random-recycle", randomBytes(5, 64<<20), true},
		{"text", textBytes(64 << 20), false},
	} {
		data, recycle := tc.data, tc.recycle
		b.Run(tc.name, func(b *testing.B) {
			c := newCodec(b, seal.Key{1})
			ch, err := chunker.New(bytes.NewReader(nil), c.Sealer().ChunkerSeed(), chunker.DefaultParams())
			if err != nil {
				b.Fatal(err)
			}
			w := NewWriter(c)
			var chunk, stored []byte
			b.SetBytes(int64(len(data)))
			cpu0 := cpuTime(b)
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
						data, _, _, err := w.Finish()
						if err != nil {
							b.Fatal(err)
						}
						if recycle {
							w.Recycle(data)
						}
					}
				}
				if w.Count() > 0 {
					if _, _, _, err := w.Finish(); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu := cpuTime(b) - cpu0
			b.ReportMetric(float64(b.N)*float64(len(data))/1e6/cpu.Seconds(), "MB/cpu-s")
		})
	}
}

// cpuTime returns the user+system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

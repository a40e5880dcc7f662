package chunker

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/stead-dev/stead/internal/errs"
)

func randomData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// chunks splits data and checks the invariants every split must hold.
func chunks(t testing.TB, r io.Reader, seed [32]byte, p Params) [][]byte {
	t.Helper()
	c, err := New(r, seed, p)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return drain(t, c, p)
}

func drain(t testing.TB, c *Chunker, p Params) [][]byte {
	t.Helper()
	var out [][]byte
	var buf []byte
	for {
		chunk, err := c.Next(buf)
		if err == io.EOF {
			if chunk != nil {
				t.Fatalf("Next returned %d bytes with io.EOF", len(chunk))
			}
			if _, err := c.Next(buf); err != io.EOF {
				t.Fatalf("Next after EOF = %v, want io.EOF", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(chunk) == 0 || len(chunk) > p.Max {
			t.Fatalf("chunk %d has length %d, want 1..%d", len(out), len(chunk), p.Max)
		}
		out = append(out, bytes.Clone(chunk))
		buf = chunk
	}
	for i, ch := range out[:max(len(out)-1, 0)] {
		if len(ch) < p.Min {
			t.Fatalf("chunk %d of %d has length %d < Min %d", i, len(out), len(ch), p.Min)
		}
	}
	return out
}

func TestDefaultParamsAreValid(t *testing.T) {
	p := DefaultParams()
	if p != (Params{Min: 128 << 10, Avg: 512 << 10, Max: 2 << 20}) {
		t.Fatalf("DefaultParams = %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRejectsBadParamsAsInvalid(t *testing.T) {
	for _, p := range []Params{
		{Min: 63, Avg: 128, Max: 256},
		{Min: 128, Avg: 128, Max: 256},
		{Min: 256, Avg: 128, Max: 512},
		{Min: 64, Avg: 128, Max: 128},
		{Min: 64, Avg: 100, Max: 256},
		{Min: 1 << 20, Avg: 4 << 20, Max: 64<<20 + 1},
		{},
	} {
		if err := p.Validate(); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", p, err)
		}
		if _, err := New(bytes.NewReader(nil), [32]byte{}, p); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", p, err)
		}
	}
	if err := (Params{Min: 64, Avg: 128, Max: 64 << 20}).Validate(); err != nil {
		t.Errorf("Validate(smallest/largest) = %v", err)
	}
}

func TestChunksConcatenateToInputWithinSizeBounds(t *testing.T) {
	small := Params{Min: 64, Avg: 256, Max: 1024}
	for _, tc := range []struct {
		name string
		n    int
		p    Params
	}{
		{"empty", 0, DefaultParams()},
		{"one byte", 1, DefaultParams()},
		{"below min", 100 << 10, DefaultParams()},
		{"exactly max", 2 << 20, DefaultParams()},
		{"several", 9<<20 + 17, DefaultParams()},
		{"small params", 200000, small},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomData(uint64(tc.n), tc.n)
			got := chunks(t, bytes.NewReader(data), [32]byte{1}, tc.p)
			if j := bytes.Join(got, nil); !bytes.Equal(j, data) {
				t.Fatalf("concatenated %d chunks (%d bytes) differ from %d input bytes", len(got), len(j), len(data))
			}
			if tc.n == 0 && len(got) != 0 {
				t.Fatalf("empty input gave %d chunks", len(got))
			}
		})
	}
}

func TestZeroInputIsCutAtMax(t *testing.T) {
	// Constant input never matches a mask: every chunk but the last is Max.
	p := DefaultParams()
	data := make([]byte, 5*p.Max+3)
	got := chunks(t, bytes.NewReader(data), [32]byte{}, p)
	if len(got) != 6 || len(got[0]) != p.Max || len(got[5]) != 3 {
		t.Fatalf("got %d chunks, first %d bytes", len(got), len(got[0]))
	}
}

func TestChunkingDoesNotDependOnReadSizes(t *testing.T) {
	data := randomData(7, 6<<20)
	p := DefaultParams()
	want := chunks(t, bytes.NewReader(data), [32]byte{3}, p)
	for name, r := range map[string]io.Reader{
		"one byte reads": iotest.OneByteReader(bytes.NewReader(data[:3<<20])),
		"half reads":     iotest.HalfReader(bytes.NewReader(data)),
		"data with EOF":  iotest.DataErrReader(bytes.NewReader(data)),
	} {
		got := chunks(t, r, [32]byte{3}, p)
		for i := range got {
			if i < len(got)-1 && !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: chunk %d differs", name, i)
			}
		}
	}
}

func TestSameSeedIsDeterministicAndSeedsChangeBoundaries(t *testing.T) {
	data := randomData(11, 16<<20)
	p := DefaultParams()
	a := chunks(t, bytes.NewReader(data), [32]byte{1}, p)
	b := chunks(t, bytes.NewReader(data), [32]byte{1}, p)
	c := chunks(t, bytes.NewReader(data), [32]byte{2}, p)
	if len(a) != len(b) {
		t.Fatalf("same seed: %d vs %d chunks", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("same seed: chunk %d differs", i)
		}
	}
	cutsA := cutSet(a)
	shared := 0
	for off := range cutSet(c) {
		if cutsA[off] {
			shared++
		}
	}
	if shared > len(cutsA)/10 {
		t.Fatalf("different seeds share %d of %d cut points", shared, len(cutsA))
	}
}

func cutSet(chunks [][]byte) map[int]bool {
	m := map[int]bool{}
	off := 0
	for _, c := range chunks[:len(chunks)-1] {
		off += len(c)
		m[off] = true
	}
	return m
}

func TestInsertionAtStartLeavesMostChunksUnchanged(t *testing.T) {
	data := randomData(13, 16<<20)
	shifted := append(randomData(99, 100), data...)
	p := DefaultParams()
	a := chunks(t, bytes.NewReader(data), [32]byte{5}, p)
	b := chunks(t, bytes.NewReader(shifted), [32]byte{5}, p)
	have := map[string]bool{}
	for _, c := range a {
		have[string(c)] = true
	}
	same := 0
	for _, c := range b {
		if have[string(c)] {
			same++
		}
	}
	if same*10 < len(a)*9 {
		t.Fatalf("only %d of %d chunks unchanged after a 100-byte insertion", same, len(a))
	}
	t.Logf("%d of %d chunks unchanged", same, len(a))
}

func TestAverageChunkSizeIsNearAvg(t *testing.T) {
	data := randomData(17, 64<<20)
	p := DefaultParams()
	got := chunks(t, bytes.NewReader(data), [32]byte{9}, p)
	avg := len(data) / len(got)
	if avg < p.Avg*8/10 || avg > p.Avg*12/10 {
		t.Fatalf("average chunk size %d, want within 20%% of %d", avg, p.Avg)
	}
	t.Logf("%d chunks, average %d bytes (Avg %d)", len(got), avg, p.Avg)
}

func TestResetReusesTheChunkerForANewStream(t *testing.T) {
	p := DefaultParams()
	d1, d2 := randomData(1, 5<<20), randomData(2, 3<<20)
	c, err := New(bytes.NewReader(d1), [32]byte{4}, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(nil); err != nil { // leave d1 half read
		t.Fatal(err)
	}
	c.Reset(bytes.NewReader(d2))
	got := drain(t, c, p)
	want := chunks(t, bytes.NewReader(d2), [32]byte{4}, p)
	if len(got) != len(want) || !bytes.Equal(bytes.Join(got, nil), d2) {
		t.Fatalf("after Reset: %d chunks, want %d", len(got), len(want))
	}
}

func TestReadErrorIsReturnedAfterTheDataBeforeIt(t *testing.T) {
	boom := errors.New("boom")
	p := DefaultParams()
	data := randomData(3, 3<<20)
	c, err := New(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(boom)), [32]byte{}, p)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for {
		chunk, err := c.Next(nil)
		if err != nil {
			if !errors.Is(err, boom) {
				t.Fatalf("err = %v, want boom", err)
			}
			break
		}
		total += len(chunk)
	}
	if total != len(data) {
		t.Fatalf("returned %d bytes before the error, want %d", total, len(data))
	}
	if _, err := c.Next(nil); !errors.Is(err, boom) {
		t.Fatalf("error is not sticky: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderWithoutProgressFails(t *testing.T) {
	c, err := New(zeroReader{}, [32]byte{}, DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(nil); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

func BenchmarkChunker(b *testing.B) {
	data := randomData(1, 64<<20)
	c, err := New(bytes.NewReader(data), [32]byte{1}, DefaultParams())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, DefaultParams().Max)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c.Reset(bytes.NewReader(data))
		for {
			chunk, err := c.Next(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			buf = chunk
		}
	}
}

// FuzzChunker checks the split invariants on arbitrary input, params and
// read sizes.
func FuzzChunker(f *testing.F) {
	f.Add(randomData(1, 5000), uint8(0), uint8(0), uint8(1), byte(1))
	f.Add(make([]byte, 3000), uint8(3), uint8(2), uint8(4), byte(2))
	f.Add([]byte{}, uint8(0), uint8(0), uint8(0), byte(0))
	f.Fuzz(func(t *testing.T, data []byte, minExtra, avgShift, maxMul uint8, seed byte) {
		p := Params{Min: 64 + int(minExtra)}
		p.Avg = 128 << (avgShift % 5)
		for p.Avg <= p.Min {
			p.Avg *= 2
		}
		p.Max = p.Avg + p.Avg*int(maxMul%4) + 1
		var r io.Reader = bytes.NewReader(data)
		if seed&1 == 1 {
			r = iotest.OneByteReader(r)
		}
		got := chunks(t, r, [32]byte{seed}, p)
		if !bytes.Equal(bytes.Join(got, nil), data) {
			t.Fatal("chunks do not concatenate to the input")
		}
	})
}

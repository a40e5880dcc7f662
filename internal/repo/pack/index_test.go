package pack

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo/seal"
)

func sampleIndex(t testing.TB, c *Codec) IndexFile {
	t.Helper()
	w := NewWriter(c)
	var f IndexFile
	for i := range 3 {
		data, id, blobs := buildPack(t, c, w, smallPackBlobs()[i:])
		f.Packs = append(f.Packs, IndexPack{ID: id, Size: int64(len(data)), Blobs: blobs})
	}
	f.Supersedes = []seal.ID{seal.Hash([]byte("old index"))}
	return f
}

func TestIndexRoundTrip(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	f := sampleIndex(t, c)
	data, err := EncodeIndex(c, f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeIndex(c, data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("roundtrip: got %+v, want %+v", got, f)
	}
	empty, err := EncodeIndex(c, IndexFile{})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := DecodeIndex(c, empty); err != nil || len(g.Packs) != 0 {
		t.Fatalf("empty index: %+v, %v", g, err)
	}
}

func TestIndexJSONUsesShortFieldNames(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	f := sampleIndex(t, c)
	js, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"packs":`, `"supersedes":`, `"blobs":`, `"t":1`, `"o":`, `"l":`, `"r":`, `"z":true`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("index JSON lacks %s: %s", want, js)
		}
	}
}

func TestDecodeIndexRejectsWrongKeyLabelAndTampering(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	data, err := EncodeIndex(c, sampleIndex(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeIndex(newCodec(t, seal.Key{2}), data); !errors.Is(err, seal.ErrAuth) {
		t.Errorf("wrong key: err = %v, want ErrAuth", err)
	}
	// A manifest sealed with another label is not an index.
	doc, err := SealDoc(c, "stead manifest v1", IndexFile{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeIndex(c, doc); !errors.Is(err, seal.ErrAuth) {
		t.Errorf("other label: err = %v, want ErrAuth", err)
	}
	for i := 0; i < len(data)*8; i += 7 {
		bad := bytes.Clone(data)
		bad[i/8] ^= 1 << (i % 8)
		if _, err := DecodeIndex(c, bad); !errors.Is(err, seal.ErrAuth) {
			t.Fatalf("bit %d: err = %v, want ErrAuth", i, err)
		}
	}
	for n := range len(data) {
		if _, err := DecodeIndex(c, data[:n]); !errors.Is(err, seal.ErrAuth) {
			t.Fatalf("truncated to %d: err = %v, want ErrAuth", n, err)
		}
	}
}

func TestIndexValidationRejectsInconsistentFiles(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	for name, mut := range map[string]func(*IndexFile){
		"zero pack id":        func(f *IndexFile) { f.Packs[0].ID = seal.ID{} },
		"pack listed twice":   func(f *IndexFile) { f.Packs[1].ID = f.Packs[0].ID },
		"zero superseded id":  func(f *IndexFile) { f.Supersedes = append(f.Supersedes, seal.ID{}) },
		"pack without blobs":  func(f *IndexFile) { f.Packs[0].Blobs = nil },
		"blob beyond size":    func(f *IndexFile) { f.Packs[0].Size = int64(f.Packs[0].Blobs[len(f.Packs[0].Blobs)-1].Offset) },
		"negative size":       func(f *IndexFile) { f.Packs[0].Size = -1 },
		"overlapping blobs":   func(f *IndexFile) { f.Packs[0].Blobs[1].Offset = f.Packs[0].Blobs[0].Offset + 1 },
		"zero blob id":        func(f *IndexFile) { f.Packs[0].Blobs[0].ID = seal.ID{} },
		"unknown blob type":   func(f *IndexFile) { f.Packs[0].Blobs[0].Type = 7 },
		"short blob":          func(f *IndexFile) { f.Packs[0].Blobs[0].Length = seal.Overhead - 1 },
		"raw length mismatch": func(f *IndexFile) { f.Packs[0].Blobs[0].RawLength = 1 },
		"huge offset": func(f *IndexFile) {
			f.Packs[0].Blobs[0].Offset = 1<<32 - 10
			f.Packs[0].Size = 1 << 40
		},
	} {
		f := sampleIndex(t, c)
		if f.Packs[0].Blobs[0].Compressed {
			t.Fatal("test setup: first blob must be raw")
		}
		mut(&f)
		if _, err := EncodeIndex(c, f); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: EncodeIndex err = %v, want ErrInvalid", name, err)
		}
		// The same file sealed by a key holder is refused on the way in.
		data, err := SealDoc(c, IndexLabel, f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeIndex(c, data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeIndex err = %v, want ErrCorrupt", name, err)
		}
	}
}

type manifest struct {
	Name  string            `json:"name"`
	Root  seal.ID           `json:"root"`
	Attrs map[string]string `json:"attrs"`
}

func TestSealDocRoundTripAndLabelBinding(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	m := manifest{Name: "snap", Root: seal.Hash([]byte("root")), Attrs: map[string]string{"a": "b"}}
	data, err := SealDoc(c, "stead manifest v1", m)
	if err != nil {
		t.Fatal(err)
	}
	var got manifest
	if err := OpenDoc(c, "stead manifest v1", data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("got %+v, want %+v", got, m)
	}
	if err := OpenDoc(c, "stead config v1", data, &got); !errors.Is(err, seal.ErrAuth) {
		t.Fatalf("other label: err = %v, want ErrAuth", err)
	}
	if err := OpenDoc(newCodec(t, seal.Key{3}), "stead manifest v1", data, &got); !errors.Is(err, seal.ErrAuth) {
		t.Fatalf("other key: err = %v, want ErrAuth", err)
	}
	if _, err := SealDoc(c, "x", func() {}); err == nil {
		t.Fatal("SealDoc of an unmarshalable value succeeded")
	}
}

func TestOpenDocRefusesOversizedOrMalformedPlaintext(t *testing.T) {
	c := newCodec(t, seal.Key{1})
	const label = "stead manifest v1"
	sealRaw := func(body []byte) []byte { return c.Sealer().Seal(nil, body, []byte(label)) }
	var v any
	for name, body := range map[string][]byte{
		"over 64 MiB":      c.enc.EncodeAll(make([]byte, MaxDocSize+1), nil),
		"no content size":  zstdStream(t, []byte(`{"a":1}`)),
		"not zstd":         []byte(`{"a":1}`),
		"empty":            nil,
		"not json":         c.enc.EncodeAll([]byte("{nope"), nil),
		"trailing garbage": append(c.enc.EncodeAll([]byte(`{}`), nil), 1, 2, 3),
	} {
		if err := OpenDoc(c, label, sealRaw(body), &v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := SealDoc(c, label, strings.Repeat("a", MaxDocSize)); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("SealDoc over 64 MiB: err = %v, want ErrInvalid", err)
	}
}

func FuzzDecodeIndex(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	data, err := EncodeIndex(c, sampleIndex(f, c))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	empty, _ := EncodeIndex(c, IndexFile{})
	f.Add(empty)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeIndex(c, data)
		if err != nil {
			if !errors.Is(err, seal.ErrAuth) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v wraps neither ErrAuth nor ErrCorrupt", err)
			}
			return
		}
		if validateIndex(got) != nil {
			t.Fatal("accepted an invalid index")
		}
	})
}

// FuzzParseIndex fuzzes the index parser behind authentication, on the
// JSON a key holder could seal.
func FuzzParseIndex(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	js, err := json.Marshal(sampleIndex(f, c))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(js)
	f.Add([]byte(`{"packs":[{"id":"` + strings.Repeat("1", 64) + `","size":100,"blobs":[{"t":1,"id":"` + strings.Repeat("2", 64) + `","o":0,"l":40,"r":12}]}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, js []byte) {
		got, err := c.parseIndex(c.enc.EncodeAll(js, nil))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if validateIndex(got) != nil {
			t.Fatal("accepted an invalid index")
		}
	})
}

func FuzzOpenDoc(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	const label = "stead manifest v1"
	data, err := SealDoc(c, label, manifest{Name: "n", Root: seal.Hash(nil)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:seal.Overhead])
	f.Fuzz(func(t *testing.T, data []byte) {
		var m manifest
		if err := OpenDoc(c, label, data, &m); err != nil && !errors.Is(err, seal.ErrAuth) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v wraps neither ErrAuth nor ErrCorrupt", err)
		}
	})
}

// FuzzParseDoc fuzzes document decompression behind authentication: a key
// holder can seal any zstd frame.
func FuzzParseDoc(f *testing.F) {
	c := newCodec(f, seal.Key{1})
	f.Add(c.enc.EncodeAll([]byte(`{"name":"n","attrs":{"a":"b"}}`), nil))
	f.Add(c.enc.EncodeAll(make([]byte, 1000), nil))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, comp []byte) {
		var m manifest
		if err := c.parseDoc(comp, &m); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
	})
}

func BenchmarkIndexEncodeDecode(b *testing.B) {
	c := newCodec(b, seal.Key{1})
	var f IndexFile
	for p := range 100 {
		ip := IndexPack{ID: seal.Hash([]byte{byte(p), byte(p >> 8)}), Size: 1<<24 + 4096}
		for i := range 32 {
			ip.Blobs = append(ip.Blobs, Blob{Type: DataBlob, ID: seal.Hash([]byte{byte(p), byte(i), 1}), Offset: uint32(i) << 19, Length: 1 << 19, RawLength: 1<<19 - seal.Overhead})
		}
		f.Packs = append(f.Packs, ip)
	}
	for b.Loop() {
		data, err := EncodeIndex(c, f)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeIndex(c, data); err != nil {
			b.Fatal(err)
		}
	}
}

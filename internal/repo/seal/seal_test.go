package seal

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

func mustKey(t testing.TB) Key {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatalf("NewKey: %v", err)
	}
	return k
}

func mustSealer(t testing.TB, k Key) *Sealer {
	t.Helper()
	s, err := NewSealer(k)
	if err != nil {
		t.Fatalf("NewSealer: %v", err)
	}
	return s
}

func TestHashIsPlainBLAKE3(t *testing.T) {
	// Official BLAKE3 test vector for the empty input.
	const empty = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
	if got := Hash(nil).String(); got != empty {
		t.Fatalf("Hash(nil) = %s, want %s", got, empty)
	}
}

func TestIDTextRoundTripsThroughParseAndJSON(t *testing.T) {
	id := Hash([]byte("stead"))
	s := id.String()
	if len(s) != 64 || strings.ToLower(s) != s {
		t.Fatalf("String() = %q, want 64 lowercase hex digits", s)
	}
	got, err := ParseID(s)
	if err != nil || got != id {
		t.Fatalf("ParseID(%q) = %v, %v; want %v", s, got, err, id)
	}
	got, err = ParseID(strings.ToUpper(s))
	if err != nil || got != id {
		t.Fatalf("ParseID(upper) = %v, %v; want %v", got, err, id)
	}
	js, err := json.Marshal(map[string]ID{"id": id})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"` + s + `"}`; string(js) != want {
		t.Fatalf("json = %s, want %s", js, want)
	}
	var back map[string]ID
	if err := json.Unmarshal(js, &back); err != nil || back["id"] != id {
		t.Fatalf("json roundtrip = %v, %v", back, err)
	}
}

func TestParseIDRejectsMalformedInputAsInvalid(t *testing.T) {
	good := Hash(nil).String()
	for _, s := range []string{"", "00", good[:63], good + "0", good[:62] + "zz", " " + good[1:], good[:63] + "\x00"} {
		if _, err := ParseID(s); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("ParseID(%q) error = %v, want ErrInvalid", s, err)
		}
		var id ID
		if err := id.UnmarshalText([]byte(s)); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("UnmarshalText(%q) error = %v, want ErrInvalid", s, err)
		}
	}
	var id ID
	if err := json.Unmarshal([]byte(`"xyz"`), &id); err == nil {
		t.Error("json.Unmarshal of a bad id succeeded")
	}
}

func TestIsZero(t *testing.T) {
	if !(ID{}).IsZero() {
		t.Error("zero ID is not IsZero")
	}
	if Hash(nil).IsZero() {
		t.Error("hash is IsZero")
	}
}

func TestNewKeyIsRandom(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	if a == b || a == (Key{}) {
		t.Fatalf("NewKey returned %x twice or zero", a)
	}
}

func TestWrapUnwrapRoundTrip(t *testing.T) {
	master, data := mustKey(t), mustKey(t)
	w, err := Wrap(master, "tenant-a", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != WrappedKeySize || w[0] != 1 {
		t.Fatalf("wrapped = %d bytes version %d, want %d bytes version 1", len(w), w[0], WrappedKeySize)
	}
	got, err := Unwrap(master, "tenant-a", w)
	if err != nil || got != data {
		t.Fatalf("Unwrap = %x, %v; want %x", got, err, data)
	}
	w2, _ := Wrap(master, "tenant-a", data)
	if bytes.Equal(w, w2) {
		t.Fatal("two wraps of the same key are identical: nonce not random")
	}
}

func TestUnwrapRejectsWrongMasterScopeOrBytes(t *testing.T) {
	master, data := mustKey(t), mustKey(t)
	w, err := Wrap(master, "tenant-a", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Unwrap(mustKey(t), "tenant-a", w); !errors.Is(err, ErrAuth) {
		t.Errorf("wrong master: err = %v, want ErrAuth", err)
	}
	if _, err := Unwrap(master, "tenant-b", w); !errors.Is(err, ErrAuth) {
		t.Errorf("wrong scope: err = %v, want ErrAuth", err)
	}
	for i := 0; i < len(w)*8; i++ {
		bad := bytes.Clone(w)
		bad[i/8] ^= 1 << (i % 8)
		if _, err := Unwrap(master, "tenant-a", bad); !errors.Is(err, ErrAuth) {
			t.Fatalf("bit %d flipped: err = %v, want ErrAuth", i, err)
		}
	}
	for n := 0; n < len(w); n++ {
		if _, err := Unwrap(master, "tenant-a", w[:n]); !errors.Is(err, ErrAuth) {
			t.Fatalf("truncated to %d: err = %v, want ErrAuth", n, err)
		}
	}
	if _, err := Unwrap(master, "tenant-a", append(bytes.Clone(w), 0)); !errors.Is(err, ErrAuth) {
		t.Errorf("extended: err = %v, want ErrAuth", err)
	}
}

func TestSealerSubkeysAreDeterministicAndDistinctPerKey(t *testing.T) {
	k := mustKey(t)
	a, b := mustSealer(t, k), mustSealer(t, k)
	other := mustSealer(t, mustKey(t))
	msg := []byte("hello")
	if a.ID(msg) != b.ID(msg) || a.ChunkerSeed() != b.ChunkerSeed() {
		t.Fatal("same key gives different ids or seeds")
	}
	if a.ID(msg) == other.ID(msg) || a.ChunkerSeed() == other.ChunkerSeed() {
		t.Fatal("different keys give the same id or seed")
	}
	if a.ID(msg) == Hash(msg) {
		t.Fatal("Sealer.ID is not keyed")
	}
	if a.ChunkerSeed() == [32]byte(k) || ID(a.ChunkerSeed()) == a.ID(nil) {
		t.Fatal("chunker seed is not an independent subkey")
	}
	// A ciphertext from a does not open under other.
	if _, err := other.Open(nil, a.Seal(nil, msg, nil), nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("open under another key: err = %v, want ErrAuth", err)
	}
}

func TestSealOpenRoundTripAppendsToDst(t *testing.T) {
	s := mustSealer(t, mustKey(t))
	for _, n := range []int{0, 1, 15, 16, 17, 1000, 1 << 20} {
		pt := bytes.Repeat([]byte{byte(n)}, n)
		sealed := s.Seal([]byte("prefix"), pt, []byte("aad"))
		if len(sealed) != len("prefix")+n+Overhead || string(sealed[:6]) != "prefix" {
			t.Fatalf("n=%d: sealed length %d or prefix lost", n, len(sealed))
		}
		got, err := s.Open([]byte("pre"), sealed[6:], []byte("aad"))
		if err != nil {
			t.Fatalf("n=%d: Open: %v", n, err)
		}
		if string(got[:3]) != "pre" || !bytes.Equal(got[3:], pt) {
			t.Fatalf("n=%d: Open returned wrong plaintext", n)
		}
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	s := mustSealer(t, mustKey(t))
	a, b := s.Seal(nil, []byte("x"), nil), s.Seal(nil, []byte("x"), nil)
	if bytes.Equal(a[:12], b[:12]) {
		t.Fatal("nonce repeated")
	}
}

func TestOpenRejectsTamperingWrongAADAndShortInput(t *testing.T) {
	s := mustSealer(t, mustKey(t))
	sealed := s.Seal(nil, []byte("some plaintext"), []byte("aad"))
	if _, err := s.Open(nil, sealed, []byte("aad!")); !errors.Is(err, ErrAuth) {
		t.Errorf("wrong aad: err = %v, want ErrAuth", err)
	}
	for i := 0; i < len(sealed)*8; i++ {
		bad := bytes.Clone(sealed)
		bad[i/8] ^= 1 << (i % 8)
		if _, err := s.Open(nil, bad, []byte("aad")); !errors.Is(err, ErrAuth) {
			t.Fatalf("bit %d flipped: err = %v, want ErrAuth", i, err)
		}
	}
	for n := 0; n < len(sealed); n++ {
		if _, err := s.Open(nil, sealed[:n], []byte("aad")); !errors.Is(err, ErrAuth) {
			t.Fatalf("truncated to %d: err = %v, want ErrAuth", n, err)
		}
	}
}

func TestSealerIsSafeForConcurrentUse(t *testing.T) {
	s := mustSealer(t, mustKey(t))
	msg := bytes.Repeat([]byte("abc"), 10000)
	want := s.ID(msg)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 200; i++ {
				if s.ID(msg) != want {
					t.Error("concurrent ID differs")
					return
				}
				pt, err := s.Open(nil, s.Seal(nil, msg[:i], nil), nil)
				if err != nil || !bytes.Equal(pt, msg[:i]) {
					t.Error("concurrent seal/open failed")
					return
				}
			}
		})
	}
	wg.Wait()
}

func FuzzUnwrap(f *testing.F) {
	var master, data Key
	for i := range master {
		master[i], data[i] = byte(i), byte(255-i)
	}
	w, err := Wrap(master, "scope", data)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("scope", w)
	f.Add("other", w)
	f.Add("", []byte{})
	f.Add("scope", []byte{1})
	f.Add("scope", w[:len(w)-1])
	f.Fuzz(func(t *testing.T, scope string, wrapped []byte) {
		k, err := Unwrap(master, scope, wrapped)
		if err != nil {
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("error %v does not wrap ErrAuth", err)
			}
			return
		}
		// Only a genuine wrap can authenticate. (Fuzz workers are separate
		// processes with their own random nonces, so the bytes may differ
		// from w.)
		if scope != "scope" || k != data {
			t.Fatalf("forged wrap accepted: scope %q, key %x", scope, k)
		}
	})
}

func FuzzOpen(f *testing.F) {
	var k Key
	s := mustSealer(f, k)
	good := s.Seal(nil, []byte("plaintext"), []byte("aad"))
	f.Add(good, []byte("aad"))
	f.Add(good[:Overhead], []byte("aad"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, sealed, aad []byte) {
		pt, err := s.Open(nil, sealed, aad)
		if err != nil {
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("error %v does not wrap ErrAuth", err)
			}
			return
		}
		if string(aad) != "aad" || string(pt) != "plaintext" {
			t.Fatal("forged ciphertext accepted")
		}
	})
}

func benchData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 >> 3)
	}
	return b
}

func BenchmarkID1MiB(b *testing.B) {
	s := mustSealer(b, Key{1})
	data := benchData(1 << 20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s.ID(data)
	}
}

func BenchmarkHash1MiB(b *testing.B) {
	data := benchData(1 << 20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		Hash(data)
	}
}

func BenchmarkSeal1MiB(b *testing.B) {
	s := mustSealer(b, Key{1})
	data := benchData(1 << 20)
	dst := make([]byte, 0, len(data)+Overhead)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s.Seal(dst[:0], data, []byte("aad"))
	}
}

func BenchmarkOpen1MiB(b *testing.B) {
	s := mustSealer(b, Key{1})
	data := benchData(1 << 20)
	sealed := s.Seal(nil, data, []byte("aad"))
	dst := make([]byte, 0, len(data))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := s.Open(dst[:0], sealed, []byte("aad")); err != nil {
			b.Fatal(err)
		}
	}
}

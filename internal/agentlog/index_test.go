package agentlog

import (
	"errors"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

func TestParseIndex(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		recs     int
		ok       bool
	}{
		{"header only", indexMagic + "42\n", 0, true},
		{"records", indexMagic + "42\n10 0\n11 100\n13 250\n", 3, true},
		{"torn last record", indexMagic + "42\n10 0\n11 1", 1, true},
		{"no header", "10 0\n", 0, false},
		{"bad inode", indexMagic + "x\n", 0, false},
		{"time going back", indexMagic + "42\n10 0\n9 100\n", 0, false},
		{"offset going back", indexMagic + "42\n10 100\n11 50\n", 0, false},
		{"negative", indexMagic + "42\n-1 0\n", 0, false},
		{"no space", indexMagic + "42\n100\n", 0, false},
	} {
		ix, err := ParseIndex([]byte(tc.in))
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errs.ErrInvalid)) {
			t.Errorf("%s: err %v", tc.name, err)
			continue
		}
		if err == nil && (len(ix.Records) != tc.recs || ix.ID != 42) {
			t.Errorf("%s: %+v", tc.name, ix)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"64MiB": 64 << 20, "16M": 16 << 20, "1g": 1 << 30, "512KiB": 512 << 10,
		"1048576": 1 << 20, "2 MB": 2_000_000, "10b": 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1M", "1.5M", "9999999999999G", "1 TB"} {
		if _, err := ParseSize(in); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("ParseSize(%q): %v", in, err)
		}
	}
	if err := (Config{MaxSize: 512 << 10, Keep: 4}).Validate(); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("max size below 1 MiB: %v", err)
	}
	if err := (Config{MaxSize: 16 << 20, Keep: 101}).Validate(); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("keep above 100: %v", err)
	}
}

func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(indexMagic + "42\n10 0\n11 100\n"))
	f.Add([]byte(indexMagic + "42\n10 0\n11 1"))
	f.Add([]byte(indexMagic + "\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := ParseIndex(b)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		if len(ix.Records) > MaxRecords {
			t.Fatalf("%d records", len(ix.Records))
		}
		for i := 1; i < len(ix.Records); i++ {
			if ix.Records[i].Time <= ix.Records[i-1].Time || ix.Records[i].Off <= ix.Records[i-1].Off {
				t.Fatalf("records out of order: %v", ix.Records)
			}
		}
		// Round trip.
		out := indexHeader(ix.ID)
		for _, r := range ix.Records {
			out = appendRecord(out, r)
		}
		again, err := ParseIndex(out)
		if err != nil || len(again.Records) != len(ix.Records) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"64MiB", "16M", "1048576", "1 GB", "-1", "kib"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatal(err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

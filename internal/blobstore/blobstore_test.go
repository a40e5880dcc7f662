package blobstore

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

func TestValidKeyAcceptsPortablePathsOnly(t *testing.T) {
	seg255 := strings.Repeat("x", 255)
	tests := map[string]bool{
		"a": true, "data/00/0123abcd": true, "A.b_c-d": true, ".hidden": true, "a/..b/c..": true,
		"...": true, seg255: true, seg255 + "/" + strings.Repeat("y", 254) + "/z": true,
		"": false, ".": false, "..": false, "a/.": false, "./a": false, "a/../b": false,
		"/a": false, "a/": false, "a//b": false, "/": false, seg255 + "x": false,
		strings.Repeat("a/", 256) + "a": false, "a b": false, "a\x00": false, "a\\b": false,
		"ü": false, "a:b": false, "a\n": false,
	}
	for key, want := range tests {
		if got := ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestValidPrefixAllowsEmptyAndOneTrailingSlash(t *testing.T) {
	tests := map[string]bool{
		"": true, "a": true, "a/": true, "a/b": true, "a/b/": true,
		"/": false, "a//": false, "/a": false, "a b/": false, "../": false,
	}
	for p, want := range tests {
		if got := ValidPrefix(p); got != want {
			t.Errorf("ValidPrefix(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestCheckRangeRejectsNegativeWithErrInvalid(t *testing.T) {
	if err := CheckRange("k", -1, 0); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := CheckRange("k", 0, -1); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("negative length: %v", err)
	}
	if err := CheckRange("k", 0, 0); err != nil {
		t.Fatalf("empty range: %v", err)
	}
}

// FuzzValidKey checks that an accepted key is safe to use as a relative path
// and an S3 object name: clean, relative, short, no traversal, plain bytes.
func FuzzValidKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "..", "a/../b", "a//b", "/a", "a/", ".", "a\x00", strings.Repeat("a", 600)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if !ValidKey(key) {
			if ValidPrefix(key) && key != "" && !strings.HasSuffix(key, "/") {
				t.Fatalf("ValidPrefix(%q) but not ValidKey", key)
			}
			return
		}
		if len(key) > MaxKeyLen || path.Clean(key) != key || path.IsAbs(key) || strings.HasPrefix(key, "../") || key == ".." {
			t.Fatalf("ValidKey(%q) accepted an unsafe path", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "." || seg == ".." || len(seg) > MaxSegmentLen {
				t.Fatalf("ValidKey(%q) accepted segment %q", key, seg)
			}
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e || key[i] == '\\' {
				t.Fatalf("ValidKey(%q) accepted byte %#x", key, key[i])
			}
		}
		if !ValidPrefix(key) || !ValidPrefix(key+"/") {
			t.Fatalf("valid key %q is not a valid prefix", key)
		}
	})
}

package names

import (
	"regexp"
	"strings"
	"testing"
)

// The hand-written checks accept exactly what the regexps they replace did.
var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	keyRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._:@+=,/-]{0,255}$`)
)

func TestChecksMatchTheirRegexps(t *testing.T) {
	for _, s := range []string{"", "a", "_x", ".x", "-x", "a.b-c_d", "a/b", "a:b@c", "x y", "é", strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("k", 256), strings.Repeat("k", 257), "a\x00b", "0", "plan.md"} {
		if Valid(s) != nameRE.MatchString(s) {
			t.Errorf("Valid(%q) = %v", s, Valid(s))
		}
		if ValidKey(s) != keyRE.MatchString(s) {
			t.Errorf("ValidKey(%q) = %v", s, ValidKey(s))
		}
	}
}

func FuzzChecksMatchTheirRegexps(f *testing.F) {
	f.Add("a.b")
	f.Add("/x")
	f.Fuzz(func(t *testing.T, s string) {
		if Valid(s) != nameRE.MatchString(s) || ValidKey(s) != keyRE.MatchString(s) {
			t.Fatalf("%q: %v/%v vs %v/%v", s, Valid(s), ValidKey(s), nameRE.MatchString(s), keyRE.MatchString(s))
		}
	})
}

func TestLooksLikeID(t *testing.T) {
	for s, want := range map[string]bool{
		"sb-abc": true, "SB-abc": true, "sb-": true, "vol-x": true, "snap-1": true, "vsnap-1": true,
		"op-1": true, "key-1": true, "th-1": true, "run-1": true, "Vol-Data": true,
		"sb": false, "sbx-1": false, "agent-1": false, "volume-1": false, "snapshot": false, "": false,
		"my-sb-1": false, "runner": false, "thread-1": false, "s": false,
	} {
		if got := LooksLikeID(s); got != want {
			t.Errorf("LooksLikeID(%q) = %v, want %v", s, got, want)
		}
	}
}

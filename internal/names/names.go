// Package names checks the names agents give to their state: checkpoint
// documents, session threads, tasks and key-value keys; and, with
// LooksLikeID, the names users give to sandboxes, volumes, templates and
// threads. The checks are
// written by hand, not as regexps: every package-level regexp compiles at
// start-up of every stead process, including the container setup each
// sandbox start re-executes.
package names

// Valid reports whether s is a name: 1 to 128 characters of letters,
// digits, '.', '_' and '-', not starting with '.' or '-'.
func Valid(s string) bool { return check(s, 128, "._-") }

// ValidKey reports whether s is a key-value key: 1 to 256 characters of
// letters, digits and "._:@+=,/-", not starting with one of those
// punctuation characters other than '_'.
func ValidKey(s string) bool { return check(s, 256, "._:@+=,/-") }

func check(s string, max int, extra string) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		case i > 0 && indexByte(extra, c):
		default:
			return false
		}
	}
	return true
}

func indexByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// IDPrefixes are the prefixes of the ids stead makes: sandboxes, volumes,
// snapshots (sandbox and volume), operations, API keys, session threads
// and runs.
var IDPrefixes = []string{"sb-", "vol-", "snap-", "vsnap-", "op-", "key-", "th-", "run-"}

// LooksLikeID reports whether s has the form of an id stead makes (one of
// IDPrefixes, in any case). Lookups take an id or a name and try the id
// first, so such a name could be shadowed by an id (or read as one by a
// person): names of that form are refused.
func LooksLikeID(s string) bool {
	for _, p := range IDPrefixes {
		if len(s) >= len(p) && equalFold(s[:len(p)], p) {
			return true
		}
	}
	return false
}

// equalFold compares ASCII strings without regard to case.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

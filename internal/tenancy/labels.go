package tenancy

import (
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
)

// maxLabels caps the labels of a sandbox (and of a key's selector).
// The rules are here because a key's selector must be able to match what
// internal/sandbox accepts on a sandbox.
const maxLabels = 64

// CheckLabels refuses labels a selector could not match plainly: a key
// is 1 to 63 of a-z A-Z 0-9 . _ - / and starts with a letter or digit; a
// value is 0 to 63 of a-z A-Z 0-9 . _ - (no '=' or ',', so "k=v,k=v"
// always parses back).
func CheckLabels(l map[string]string) error {
	if len(l) > maxLabels {
		return fmt.Errorf("%d labels: at most %d: %w", len(l), maxLabels, errs.ErrInvalid)
	}
	for k, v := range l {
		if !validLabel(k, true) {
			return fmt.Errorf("label key %q: use 1 to 63 of a-z A-Z 0-9 . _ - /, starting with a letter or digit: %w", k, errs.ErrInvalid)
		}
		if !validLabel(v, false) {
			return fmt.Errorf("label %s value %q: use up to 63 of a-z A-Z 0-9 . _ -: %w", k, v, errs.ErrInvalid)
		}
	}
	return nil
}

// validLabel checks a label key (key) or value (!key).
func validLabel(s string, key bool) bool {
	if len(s) > 63 || (key && s == "") {
		return false
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		switch {
		case alnum:
		case i == 0 && key:
			return false
		case c == '.' || c == '_' || c == '-':
		case c == '/' && key:
		default:
			return false
		}
	}
	return true
}

// Package errs holds the sentinel errors that callers across stead branch on.
// The HTTP layer maps each of them to a status code in exactly one place
// (internal/api), so a package returns these (wrapped) rather than inventing
// its own.
package errs

import (
	"errors"
	"strings"
)

var (
	// ErrNotFound means the named thing does not exist, or belongs to another
	// tenant: the two are deliberately indistinguishable (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrConflict means the request is valid but the current state forbids it:
	// an illegal lifecycle transition, a name already taken, a stale version
	// (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrInvalid means the request itself is malformed: bad name, path escaping
	// a root, unknown instance type (HTTP 400).
	ErrInvalid = errors.New("invalid argument")
	// ErrQuota means a limit would be exceeded (HTTP 507 for disk, 429 else).
	ErrQuota = errors.New("quota exceeded")
	// ErrUnauthenticated means no valid credential was presented (HTTP 401).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden means the credential is valid but may not do this (HTTP 403).
	ErrForbidden = errors.New("forbidden")
	// ErrBudget means a spend cap (a budget with action pause or stop) is
	// reached: what would spend more is refused until the cap is raised or
	// the next period starts (HTTP 402).
	ErrBudget = errors.New("budget exceeded")
	// ErrTooLarge means a document, payload or value is over its size
	// limit; the message names the limit (HTTP 413). It is a kind of
	// ErrInvalid: errors.Is(err, ErrInvalid) holds for it too.
	ErrTooLarge error = tooLarge{}
	// ErrUnsupported means this implementation cannot do what was asked, for
	// example a disk quota on a dir pool over ext4 (HTTP 501).
	ErrUnsupported = errors.New("unsupported")
)

// classTags are the sentinels whose text is only a class name: wrapped
// with %w they leave "...: conflict" in a message, which tells a user
// nothing the HTTP status or the CLI's exit code does not already say.
var classTags = []error{ErrConflict, ErrForbidden, ErrInvalid, ErrUnauthenticated, ErrTooLarge}

// explanations are the sentinels whose text can be the whole explanation
// ("run r: not found"): they stay, unless a more precise text follows them
// ("read /x: not found: no such file or directory").
var explanations = []error{ErrNotFound, ErrQuota, ErrUnsupported, ErrBudget}

// Message is err's text as a user should read it: without the class names
// that wrapping a sentinel leaves in it ("cannot pause sandbox a: it is
// stopped: conflict" reads "cannot pause sandbox a: it is stopped"). The
// API's problem documents and failed operations carry this text; the class
// is in their status.
func Message(err error) string {
	msg := err.Error()
	for _, s := range classTags {
		if !errors.Is(err, s) {
			continue
		}
		tag := s.Error()
		if m, ok := strings.CutSuffix(msg, ": "+tag); ok {
			msg = m
		} else if m, ok := strings.CutPrefix(msg, tag+": "); ok {
			msg = m
		} else {
			msg = strings.Replace(msg, ": "+tag+": ", ": ", 1)
		}
	}
	for _, s := range explanations {
		if errors.Is(err, s) {
			msg = strings.Replace(msg, ": "+s.Error()+": ", ": ", 1)
		}
	}
	return msg
}

// tooLarge is ErrTooLarge: comparable, and also ErrInvalid.
type tooLarge struct{}

func (tooLarge) Error() string { return "too large" }

// Is makes a too-large error an invalid one as well.
func (tooLarge) Is(target error) bool { return target == ErrInvalid }

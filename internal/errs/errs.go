// Package errs holds the sentinel errors that callers across stead branch on.
// The HTTP layer maps each of them to a status code in exactly one place
// (internal/api), so a package returns these (wrapped) rather than inventing
// its own.
package errs

import "errors"

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
	// ErrUnsupported means this implementation cannot do what was asked, for
	// example a disk quota on a dir pool over ext4 (HTTP 501).
	ErrUnsupported = errors.New("unsupported")
)

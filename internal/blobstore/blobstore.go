// Package blobstore defines the seam between stead's repository and the place
// its objects live: a local directory (package local) or an S3-compatible
// object store (package s3). Every implementation passes the contract suite in
// package blobstoretest; package faulty wraps any implementation to inject
// faults in tests.
//
// Objects are immutable named byte strings. Keys are '/'-separated paths of
// portable characters (see ValidKey), so the same key names the same object in
// a directory tree and in an S3 bucket.
package blobstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/stead-dev/stead/internal/errs"
)

// MaxKeyLen is the longest legal key in bytes.
const MaxKeyLen = 512

// MaxSegmentLen is the longest legal '/'-separated key segment in bytes.
const MaxSegmentLen = 255

// Info describes one stored object.
type Info struct {
	// Key is the object's full key.
	Key string
	// Size is the object's length in bytes.
	Size int64
}

// BlobStore stores immutable named objects (repository packs, index files,
// manifests, keys).
//
// Every method returns errs.ErrInvalid (wrapped) for an invalid key and then
// touches nothing. Every method may be retried after an error: Put replaces,
// Delete of an absent key succeeds, reads have no side effects. A BlobStore is
// safe for concurrent use by multiple goroutines.
type BlobStore interface {
	// Location names the store for messages ("file:///x",
	// "s3://host/bucket/prefix"). It never contains credentials.
	Location() string
	// Put stores data under key atomically and durably: once Put returns nil
	// the object survives a crash of this process or machine (local:
	// temp+fsync+rename+fsync dir); a concurrent or later reader sees either
	// nothing or all of data, never a part. Put over an existing key replaces
	// it. Safe to retry.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns the whole object; errs.ErrNotFound (wrapped) if absent.
	Get(ctx context.Context, key string) ([]byte, error)
	// GetRange returns length bytes at offset; errs.ErrNotFound if absent; an
	// error wrapping io.ErrUnexpectedEOF (not a short read) if the object is
	// shorter than offset+length. A negative offset or length is
	// errs.ErrInvalid. A zero length at offset <= size returns no bytes.
	GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error)
	// Stat returns the object's Info; errs.ErrNotFound if absent.
	Stat(ctx context.Context, key string) (Info, error)
	// List returns every object whose key starts with prefix, sorted by key.
	// prefix "" lists all. A prefix is a plain string prefix (so "a/b"
	// matches "a/bc/d"). An empty result is an empty slice and no error.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes key; deleting an absent key is not an error (idempotent,
	// safe to retry).
	Delete(ctx context.Context, key string) error
}

// ValidKey reports whether key is a legal object key: 1..512 bytes,
// '/'-separated segments each 1..255 bytes of [a-zA-Z0-9._-], no segment "."
// or "..", no leading/trailing '/', no "//".
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for seg := range strings.SplitSeq(key, "/") {
		if !validSegment(seg) {
			return false
		}
	}
	return true
}

func validSegment(seg string) bool {
	if len(seg) == 0 || len(seg) > MaxSegmentLen || seg == "." || seg == ".." {
		return false
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidPrefix reports whether prefix is a legal List prefix: "", a valid key,
// or a valid key followed by one '/'.
func ValidPrefix(prefix string) bool {
	if prefix == "" {
		return true
	}
	return ValidKey(strings.TrimSuffix(prefix, "/"))
}

// CheckKey returns nil for a valid key and an error wrapping errs.ErrInvalid
// naming op otherwise. Implementations call it first in every method.
func CheckKey(op, key string) error {
	if !ValidKey(key) {
		return fmt.Errorf("%s %q: invalid object key: %w", op, key, errs.ErrInvalid)
	}
	return nil
}

// CheckPrefix returns nil for a valid List prefix and an error wrapping
// errs.ErrInvalid otherwise.
func CheckPrefix(prefix string) error {
	if !ValidPrefix(prefix) {
		return fmt.Errorf("list %q: invalid key prefix: %w", prefix, errs.ErrInvalid)
	}
	return nil
}

// CheckRange returns nil when key is valid and offset and length are
// non-negative, and an error wrapping errs.ErrInvalid otherwise.
func CheckRange(key string, offset, length int64) error {
	if err := CheckKey("get range", key); err != nil {
		return err
	}
	if offset < 0 || length < 0 {
		return fmt.Errorf("get range %q [%d,+%d): negative offset or length: %w", key, offset, length, errs.ErrInvalid)
	}
	return nil
}

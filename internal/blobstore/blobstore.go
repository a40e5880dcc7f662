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

// RangeReader is implemented by a BlobStore whose reads cost no request
// (local files): a caller reads in small pieces into buffers it reuses
// instead of fetching large ranges into fresh memory.
type RangeReader interface {
	// ReadRange reads len(buf) bytes at offset into buf, with GetRange's
	// errors: errs.ErrNotFound if absent, io.ErrUnexpectedEOF (wrapped) if
	// the object is shorter than offset+len(buf), errs.ErrInvalid for a
	// bad key or a negative offset.
	ReadRange(ctx context.Context, key string, offset int64, buf []byte) error
}

// Spooler is implemented by a BlobStore that can store an object whose
// bytes are written before its key is known (a pack is named by the hash
// of its bytes) without holding the bytes in memory: the local store
// writes them to a temp file that Commit renames. A wrapper whose inner
// store has no such path returns an error wrapping errs.ErrUnsupported
// from Spool; callers then fall back to Put.
type Spooler interface {
	// Spool starts a new object to be committed under a key that begins
	// with dir + "/" (dir is a valid key, used as a placement hint).
	Spool(ctx context.Context, dir string) (Spool, error)
}

// Spool is an object being written through Spooler.Spool.
type Spool interface {
	// Write appends to the object. It is not safe for concurrent use.
	Write(p []byte) (int, error)
	// Commit stores the bytes written as the object key, atomically and
	// durably as Put does (the same guarantees, the same errors for a bad
	// key), and releases the spool. After an error the spool is released
	// too: nothing was stored, or (as after a Put whose reply was lost) the
	// object was stored and the caller cannot tell.
	Commit(ctx context.Context, key string) error
	// Abort discards the bytes written and releases the spool. It does
	// nothing after Commit or a previous Abort.
	Abort()
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

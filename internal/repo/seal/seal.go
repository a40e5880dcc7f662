// Package seal holds the repository's identities and cryptography: BLAKE3
// content ids, 256-bit keys, key wrapping under a master key and the
// authenticated encryption (AES-256-GCM) of every stored byte.
//
// Key hierarchy: a master key wraps one data key per scope (tenant). A data
// key is never used directly; NewSealer derives three independent subkeys from
// it with BLAKE3's key derivation mode: one for AES-256-GCM, one keying the
// BLAKE3 hash that names blobs, one seeding the chunker's gear table.
// Destroying a scope's wrapped data key therefore erases that scope's data
// cryptographically.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/zeebo/blake3"
)

// ErrAuth means authenticated decryption failed: wrong key or
// corrupted/tampered bytes.
var ErrAuth = errors.New("authentication failed")

// Overhead is the number of bytes Seal adds to a plaintext: a 12-byte nonce
// and a 16-byte GCM tag.
const Overhead = nonceSize + tagSize

const (
	nonceSize = 12
	tagSize   = 16

	wrapVersion = 1
	// WrappedKeySize is the length of Wrap's output.
	WrappedKeySize = 1 + nonceSize + 32 + tagSize

	ctxEncryption = "stead 2026 seal v1 encryption"
	ctxID         = "stead 2026 seal v1 id"
	ctxChunker    = "stead 2026 seal v1 chunker"
	wrapAADPrefix = "stead key v1 "
)

// ID is a 32-byte BLAKE3 digest naming a blob, pack, index file or manifest.
type ID [32]byte

// String returns the id as 64 lowercase hex digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the all-zero id, which names nothing.
func (id ID) IsZero() bool { return id == ID{} }

// ParseID parses 64 hex digits (either case) into an ID; any other input is
// an error wrapping errs.ErrInvalid.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return ID{}, fmt.Errorf("parse id %q: want %d hex digits: %w", truncate(s), 2*len(id), errs.ErrInvalid)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ID{}, fmt.Errorf("parse id %q: %w", truncate(s), errs.ErrInvalid)
	}
	return id, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// MarshalText encodes the id as lowercase hex (used by encoding/json).
func (id ID) MarshalText() ([]byte, error) {
	b := make([]byte, 2*len(id))
	hex.Encode(b, id[:])
	return b, nil
}

// UnmarshalText decodes a hex id; see ParseID.
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) != 2*len(id) {
		return fmt.Errorf("parse id: want %d hex digits, got %d bytes: %w", 2*len(id), len(b), errs.ErrInvalid)
	}
	var v ID
	if _, err := hex.Decode(v[:], b); err != nil {
		return fmt.Errorf("parse id: %w", errs.ErrInvalid)
	}
	*id = v
	return nil
}

// Hash returns the plain (unkeyed) BLAKE3-256 digest of data. It names pack
// files and the files holding index and manifest objects, whose contents are
// already sealed and so reveal nothing.
func Hash(data []byte) ID { return ID(blake3.Sum256(data)) }

// Key is a 256-bit secret: the master key or a scope's data key.
type Key [32]byte

// NewKey returns a fresh random key from crypto/rand.
func NewKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return Key{}, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

func newGCM(k []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("create aes cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("create gcm: %w", err)
	}
	return aead, nil
}

// Wrap encrypts a data key under the master key for one scope (AES-256-GCM,
// random 96-bit nonce, AAD = "stead key v1 " + scope). The output is
// version byte 1 || nonce || ciphertext || tag, WrappedKeySize bytes long.
func Wrap(master Key, scope string, data Key) ([]byte, error) {
	aead, err := newGCM(master[:])
	if err != nil {
		return nil, fmt.Errorf("wrap key: %w", err)
	}
	out := make([]byte, 1+nonceSize, WrappedKeySize)
	out[0] = wrapVersion
	if _, err := rand.Read(out[1 : 1+nonceSize]); err != nil {
		return nil, fmt.Errorf("wrap key: read nonce: %w", err)
	}
	return aead.Seal(out, out[1:1+nonceSize], data[:], []byte(wrapAADPrefix+scope)), nil
}

// Unwrap reverses Wrap. It returns an error wrapping ErrAuth if the master
// key, the scope or the wrapped bytes are wrong.
func Unwrap(master Key, scope string, wrapped []byte) (Key, error) {
	if len(wrapped) != WrappedKeySize || wrapped[0] != wrapVersion {
		return Key{}, fmt.Errorf("unwrap key for scope %q: malformed wrapped key: %w", scope, ErrAuth)
	}
	aead, err := newGCM(master[:])
	if err != nil {
		return Key{}, fmt.Errorf("unwrap key: %w", err)
	}
	var k Key
	pt, err := aead.Open(k[:0], wrapped[1:1+nonceSize], wrapped[1+nonceSize:], []byte(wrapAADPrefix+scope))
	if err != nil || len(pt) != len(k) {
		return Key{}, fmt.Errorf("unwrap key for scope %q: %w", scope, ErrAuth)
	}
	return k, nil
}

// Sealer holds the subkeys derived from one data key: an AES-256-GCM AEAD,
// a keyed BLAKE3 for content ids and a chunker seed. It is safe for
// concurrent use.
type Sealer struct {
	aead   cipher.AEAD
	idKey  [32]byte
	seed   [32]byte
	hashes sync.Pool // *blake3.Hasher keyed with idKey
}

// NewSealer derives the subkeys of data key k.
func NewSealer(k Key) (*Sealer, error) {
	var encKey [32]byte
	blake3.DeriveKey(ctxEncryption, k[:], encKey[:])
	s := &Sealer{}
	blake3.DeriveKey(ctxID, k[:], s.idKey[:])
	blake3.DeriveKey(ctxChunker, k[:], s.seed[:])
	aead, err := newGCM(encKey[:])
	if err != nil {
		return nil, fmt.Errorf("new sealer: %w", err)
	}
	s.aead = aead
	idKey := s.idKey
	s.hashes.New = func() any {
		h, err := blake3.NewKeyed(idKey[:])
		if err != nil {
			// Unreachable: the key is always 32 bytes.
			panic("seal: keyed blake3: " + err.Error())
		}
		return h
	}
	return s, nil
}

// ID returns the keyed BLAKE3-256 digest of plaintext. Ids are keyed so the
// same content in two scopes gets different ids (no cross-scope dedup) and an
// id reveals nothing about content without the key.
func (s *Sealer) ID(plaintext []byte) ID {
	h := s.hashes.Get().(*blake3.Hasher)
	h.Reset()
	_, _ = h.Write(plaintext)
	var id ID
	h.Sum(id[:0])
	s.hashes.Put(h)
	return id
}

// Seal encrypts and authenticates plaintext with aad and appends
// nonce (12 random bytes) || ciphertext || tag (16 bytes) to dst.
// dst and plaintext must not overlap.
func (s *Sealer) Seal(dst, plaintext, aad []byte) []byte {
	n := len(dst)
	dst = grow(dst, nonceSize+len(plaintext)+tagSize)
	nonce := dst[n : n+nonceSize]
	if _, err := rand.Read(nonce); err != nil {
		// crypto/rand.Read never returns an error on supported platforms.
		panic("seal: crypto/rand failed: " + err.Error())
	}
	return s.aead.Seal(dst[:n+nonceSize], nonce, plaintext, aad)
}

// Open authenticates and decrypts sealed (as produced by Seal with the same
// aad) and appends the plaintext to dst. Any failure, a short input
// included, returns an error wrapping ErrAuth. dst and sealed must not
// overlap.
func (s *Sealer) Open(dst, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < Overhead {
		return dst, fmt.Errorf("open sealed data: %d bytes is too short: %w", len(sealed), ErrAuth)
	}
	out, err := s.aead.Open(dst, sealed[:nonceSize], sealed[nonceSize:], aad)
	if err != nil {
		return dst, fmt.Errorf("open sealed data: %w", ErrAuth)
	}
	return out, nil
}

// ChunkerSeed returns the secret seed for the chunker's gear table.
func (s *Sealer) ChunkerSeed() [32]byte { return s.seed }

// grow returns dst extended by n bytes, reallocating if its capacity is
// too small.
func grow(dst []byte, n int) []byte {
	l := len(dst)
	if cap(dst)-l < n {
		nd := make([]byte, l, l+n)
		copy(nd, dst)
		dst = nd
	}
	return dst[:l+n]
}

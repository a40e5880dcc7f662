package tenancy

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/stead-dev/stead/internal/fsutil"
)

// NewSecretKey returns the key kept in the file path (made on first use),
// or preset itself when it is 32 bytes. With neither, the key is made in
// memory and lost with the process (tests: a new service then cannot open
// what an earlier one sealed).
func NewSecretKey(path string, preset []byte) *SecretKey {
	return &SecretKey{path: path, preset: preset}
}

// Path is the key file ("" when the key is not kept in a file).
func (k *SecretKey) Path() string { return k.path }

// SecretKey is the key that seals sandbox environments (in
// internal/sandbox) and, through Derive, tenant secrets; loaded (or made,
// 0600) on first use. A cluster's nodes share one (Options.SecretsKey of
// the sandbox service, derived from the cluster secret).
type SecretKey struct {
	// path is the key file; "" keeps a key in memory only, for tests (a
	// new service then cannot open what an earlier one sealed).
	path string
	// preset, when set, is the key itself (a cluster's nodes share one,
	// derived from the cluster secret) and path is not used.
	preset []byte

	mu   sync.Mutex
	key  []byte // the key file's bytes, once loaded
	aead cipher.AEAD
	// derived are the AEADs of keys derived from key for other purposes
	// (Derive), by purpose.
	derived map[string]cipher.AEAD
}

// AEAD returns the AEAD of the key itself; create makes the key file when it does not exist.
func (k *SecretKey) AEAD(create bool) (cipher.AEAD, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.aead != nil {
		return k.aead, nil
	}
	key := make([]byte, 32)
	var b []byte
	err := fs.ErrNotExist
	if k.path != "" {
		b, err = os.ReadFile(k.path)
	}
	switch {
	case len(k.preset) == 32:
		key = k.preset
	case k.path == "":
		rand.Read(key)
	case err == nil:
		if len(b) != 32 {
			return nil, fmt.Errorf("secrets key %s holds %d bytes, not 32: restore it from a copy (without it no sealed sandbox environment opens)", k.path, len(b))
		}
		key = b
	case errors.Is(err, fs.ErrNotExist) && create:
		rand.Read(key)
		if err := fsutil.WriteFileAtomic(k.path, key, 0o600); err != nil {
			return nil, fmt.Errorf("create secrets key: %w", err)
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("secrets key %s is missing: restore it from a copy (without it no sealed sandbox environment opens)", k.path)
	default:
		return nil, fmt.Errorf("read secrets key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if k.aead, err = cipher.NewGCM(block); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	k.key = key
	return k.aead, nil
}

// Derive returns an AES-256-GCM AEAD under a key derived from the secrets
// key for purpose (HKDF-SHA256, purpose as its info): one key file serves
// several uses, and a value sealed for one purpose never opens for another.
// create makes the key file when it does not exist.
func (k *SecretKey) Derive(purpose string, create bool) (cipher.AEAD, error) {
	if _, err := k.AEAD(create); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if a, ok := k.derived[purpose]; ok {
		return a, nil
	}
	sub, err := hkdf.Key(sha256.New, k.key, nil, purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the %s key: %w", purpose, err)
	}
	block, err := aes.NewCipher(sub)
	if err != nil {
		return nil, fmt.Errorf("derive the %s key: %w", purpose, err)
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("derive the %s key: %w", purpose, err)
	}
	if k.derived == nil {
		k.derived = map[string]cipher.AEAD{}
	}
	k.derived[purpose] = a
	return a, nil
}

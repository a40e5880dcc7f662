package events

import (
	"crypto/aes"
	"crypto/cipher"
	cryptorand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/stead-dev/stead/internal/store"
)

// Webhook secrets at rest. Signing needs the secret itself (not a hash),
// so with Options.SecretKey set the store holds it sealed: AES-256-GCM
// under that key, the webhook id as additional data (a sealed secret
// copied to another webhook's row does not open), as
// "sealed:v1:" + base64(nonce || ciphertext). Without a key (tests) it is
// stored as given.

const sealedPrefix = "sealed:v1:"

// sealSecret seals a new webhook's secret for the store.
func (h *Hub) sealSecret(id, secret string) (string, error) {
	if h.opts.SecretKey == nil {
		return secret, nil
	}
	aead, err := h.aead()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(secret)+aead.Overhead())
	if _, err := cryptorand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal webhook secret: %w", err)
	}
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(secret), []byte(id))), nil
}

// secretOf returns the webhook's secret, opened when it is sealed.
func (h *Hub) secretOf(w store.Webhook) (string, error) {
	if !strings.HasPrefix(w.Secret, sealedPrefix) {
		return w.Secret, nil
	}
	if h.opts.SecretKey == nil {
		return "", errors.New("the webhook's secret is sealed and the daemon has no webhook key")
	}
	aead, err := h.aead()
	if err != nil {
		return "", err
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimPrefix(w.Secret, sealedPrefix))
	if err != nil || len(b) < aead.NonceSize() {
		return "", errors.New("the webhook's sealed secret is malformed")
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], []byte(w.ID))
	if err != nil {
		return "", errors.New("the webhook's secret does not open with the daemon's webhook key (was the key file replaced?)")
	}
	return string(plain), nil
}

func (h *Hub) aead() (cipher.AEAD, error) {
	if len(h.opts.SecretKey) != 32 {
		return nil, fmt.Errorf("webhook key: %d bytes, want 32", len(h.opts.SecretKey))
	}
	b, err := aes.NewCipher(h.opts.SecretKey)
	if err != nil {
		return nil, fmt.Errorf("webhook key: %w", err)
	}
	return cipher.NewGCM(b)
}

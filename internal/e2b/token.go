package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// KeyPrefix starts the E2B form of a stead API key: "e2b_" and the hex
// of the stead key's secret. It is an encoding, not a second key: the
// stead key's role, scope, expiry and revocation apply unchanged.
const KeyPrefix = "e2b_"

// EncodeKey returns the E2B form of a stead API key secret, the form
// E2B SDKs up to 2.50 insist on (e2b_ and hex digits).
func EncodeKey(secret string) string {
	return KeyPrefix + hex.EncodeToString([]byte(secret))
}

// decodeKey returns the stead secret of a key in the E2B form, and any
// other key unchanged.
func decodeKey(key string) string {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return key
	}
	b, err := hex.DecodeString(rest)
	if err != nil {
		return key // fails authentication as given
	}
	return string(b)
}

// accessToken is the envd access token of a sandbox of a tenant:
// base64url(tenant) "." hex(HMAC-SHA256(key, "e2b-envd" 0 tenant 0 id)).
// It is derived, not stored, so it survives a daemon restart; it names
// the tenant, so a data-plane call needs no API key.
func accessToken(key []byte, tenant, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tenant)) + "." + tokenMAC(key, tenant, id)
}

func tokenMAC(key []byte, tenant, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("e2b-envd\x00" + tenant + "\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// checkToken returns the tenant a token grants sandbox id to, or false.
func checkToken(key []byte, id, token string) (string, bool) {
	enc, mac, ok := strings.Cut(token, ".")
	if !ok || len(key) == 0 {
		return "", false
	}
	t, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	tenant := string(t)
	if !hmac.Equal([]byte(mac), []byte(tokenMAC(key, tenant, id))) {
		return "", false
	}
	return tenant, true
}

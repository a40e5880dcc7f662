package network

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

var safeKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// key is the sandbox id as used in file and nftables object names: the
// id itself when it is short and plain, else a digest of it. "ns" and
// names starting with "." are digested so they never collide with RunDir's
// own entries.
func key(id string) string {
	if safeKey.MatchString(id) && id != "ns" {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h" + hex.EncodeToString(sum[:12])
}

// vethName is the host side's interface name (15 bytes at most, unique
// per table and sandbox).
func vethName(table, id string) string {
	sum := sha256.Sum256([]byte(table + "\x00" + id))
	return "sv" + hex.EncodeToString(sum[:])[:12]
}

// aliasPrefix starts the alias of every host-side link of a table's
// sandboxes; the sandbox's key follows it.
func aliasPrefix(table string) string { return "stead:" + table + ":" }

package egress

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// TLS constants of the ClientHello parser.
const (
	recordHandshake   = 22
	handshakeHello    = 1
	extServerName     = 0
	nameTypeHostName  = 0
	recordHeaderLen   = 5
	maxRecordFragment = 1 << 14
)

// errNeedMore says the bytes end before the ClientHello does.
var errNeedMore = errors.New("more bytes needed")

// clientHelloSNI reads the TLS records at the start of b, which must be
// handshake records carrying a ClientHello (possibly split across several
// records), and returns the ClientHello's server name in canonical form
// ("" when it has none). When b ends before the ClientHello does it
// returns errNeedMore and need, the length b must reach before another
// call can make progress. Any other error means b is not a ClientHello
// stead accepts.
func clientHelloSNI(b []byte) (name string, need int, err error) {
	var hs []byte // the handshake stream, reassembled
	off := 0
	for {
		if len(b)-off < recordHeaderLen {
			return "", off + recordHeaderLen, errNeedMore
		}
		h := b[off : off+recordHeaderLen]
		if h[0] != recordHandshake {
			return "", 0, fmt.Errorf("tls record type %d before the ClientHello ends", h[0])
		}
		if h[1] != 3 {
			return "", 0, fmt.Errorf("tls record version %d.%d", h[1], h[2])
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 || n > maxRecordFragment {
			return "", 0, fmt.Errorf("tls record of %d bytes", n)
		}
		if len(b)-off-recordHeaderLen < n {
			return "", off + recordHeaderLen + n, errNeedMore
		}
		hs = append(hs, b[off+recordHeaderLen:off+recordHeaderLen+n]...)
		off += recordHeaderLen + n
		if len(hs) < 4 {
			continue
		}
		if hs[0] != handshakeHello {
			return "", 0, fmt.Errorf("tls handshake message type %d, not a ClientHello", hs[0])
		}
		mlen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if len(hs) < 4+mlen {
			continue
		}
		if len(hs) > 4+mlen {
			// Another handshake message follows the ClientHello in its
			// record: no client does that.
			return "", 0, errors.New("tls bytes after the ClientHello")
		}
		name, err := parseClientHello(hs[4:])
		return name, 0, err
	}
}

// parseClientHello returns the host name of a ClientHello body's
// server_name extension ("" without one). A duplicated extension, a
// second host name or a name that is not a DNS host name is an error.
func parseClientHello(body []byte) (string, error) {
	s := cryptobyte.String(body)
	var (
		version             uint16
		random, session     []byte
		ciphers, compressed cryptobyte.String
	)
	if !s.ReadUint16(&version) || !s.ReadBytes(&random, 32) ||
		!s.ReadUint8LengthPrefixed((*cryptobyte.String)(&session)) || len(session) > 32 ||
		!s.ReadUint16LengthPrefixed(&ciphers) || len(ciphers) == 0 || len(ciphers)%2 != 0 ||
		!s.ReadUint8LengthPrefixed(&compressed) || len(compressed) == 0 {
		return "", errors.New("malformed ClientHello")
	}
	if s.Empty() {
		return "", nil // no extensions
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return "", errors.New("malformed ClientHello extensions")
	}
	seen := map[uint16]bool{}
	name := ""
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", errors.New("malformed ClientHello extension")
		}
		if seen[typ] {
			return "", fmt.Errorf("ClientHello extension %d twice", typ)
		}
		seen[typ] = true
		if typ != extServerName {
			continue
		}
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
			return "", errors.New("malformed server_name extension")
		}
		for !list.Empty() {
			var nt uint8
			var host cryptobyte.String
			if !list.ReadUint8(&nt) || !list.ReadUint16LengthPrefixed(&host) {
				return "", errors.New("malformed server_name entry")
			}
			if nt != nameTypeHostName {
				continue
			}
			if name != "" {
				return "", errors.New("server_name with two host names")
			}
			n, err := hostName(string(host))
			if err != nil {
				return "", fmt.Errorf("server_name: %w", err)
			}
			name = n
		}
	}
	return name, nil
}

// hostName checks a name carried by an SNI or a Host header (without a
// port): letters, digits, '-', '_' and '.', or an IPv4 address, at most
// 253 bytes (a trailing dot aside). It returns the name in lower case
// without a trailing dot.
func hostName(s string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(s, "."))
	if n == "" || len(n) > 253 {
		return "", fmt.Errorf("host name of %d bytes", len(n))
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("host name %q has byte %#x", n, c)
		}
	}
	if strings.HasPrefix(n, ".") || strings.Contains(n, "..") {
		return "", fmt.Errorf("host name %q has an empty label", n)
	}
	return n, nil
}

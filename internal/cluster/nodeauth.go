package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// Node-to-node calls.
//
// A node that forwards a client's request to the sandbox's owner, or calls
// another node for itself (the failover coordinator's "adopt this
// sandbox"), signs the request with the cluster secret, a byte string
// every node reads from its --cluster-secret-file:
//
//	X-Stead-Node:           the sending node's name
//	X-Stead-Node-Time:      the unix time of signing, in seconds
//	X-Stead-Node-Signature: hex(HMAC-SHA256(secret, "stead-node-v1\n" + method + "\n" +
//	                        path?query + "\n" + node + "\n" + time + "\n" + hex(credentials)))
//
// where credentials is the SHA-256 of the request's Authorization,
// X-API-Key and X-Stead-Tenant values (length-prefixed): a forwarded call
// carries the client's own credentials, which the receiving node checks
// against the shared store itself, and the signature binds them, so the
// headers of one signed request cannot be put on another caller's. The
// body is not signed (it is streamed). A receiving node accepts a signature
// made within ±SignatureWindow of its own clock and compares it in constant
// time. A request carrying any of these headers that does not verify is
// refused with 401: it is never served, neither as a client's call nor as a
// node's.
//
// A signed request can be replayed unchanged within the window by whoever
// can read it on the wire; what it grants is no more than its credentials
// do (a forwarded call) or what a node-only route does with it. Node
// addresses are internal, and sandboxes cannot reach host addresses.

// Node-call header names.
const (
	// HeaderNode names the sending node.
	HeaderNode = "X-Stead-Node"
	// HeaderNodeTime is the unix time (seconds) of the signature.
	HeaderNodeTime = "X-Stead-Node-Time"
	// HeaderNodeSignature is the hex HMAC-SHA256 signature.
	HeaderNodeSignature = "X-Stead-Node-Signature"
)

// MinSecretBytes is the shortest cluster secret accepted.
const MinSecretBytes = 32

// SignatureWindow is how far a node call's time may be from the receiving
// node's clock.
const SignatureWindow = 60 * time.Second

// maxNodeName bounds the node name a signature may carry.
const maxNodeName = 253

// signatureDomain starts every signed message (a version tag).
const signatureDomain = "stead-node-v1"

// LoadSecret reads the cluster secret from path: the file's bytes, less
// surrounding white space (a trailing newline from an editor or from
// `openssl rand -hex 32 > FILE`). It must be at least MinSecretBytes long
// and readable by its owner only (mode 0600 or stricter): it lets its
// holder act as any node.
func LoadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read cluster secret: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read cluster secret %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster secret %s is not a regular file: %w", path, errs.ErrInvalid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster secret %s has mode %04o: it must be readable by its owner only (chmod 600 %s): %w",
			path, fi.Mode().Perm(), path, errs.ErrInvalid)
	}
	const maxSecret = 64 << 10
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err != nil {
		return nil, fmt.Errorf("read cluster secret %s: %w", path, err)
	}
	if len(b) > maxSecret {
		return nil, fmt.Errorf("cluster secret %s is over %d bytes: %w", path, maxSecret, errs.ErrInvalid)
	}
	s := []byte(strings.TrimSpace(string(b)))
	if len(s) < MinSecretBytes {
		return nil, fmt.Errorf("cluster secret %s has %d bytes, fewer than %d (make one with: openssl rand -hex 32 > %s; chmod 600 %s): %w",
			path, len(s), MinSecretBytes, path, path, errs.ErrInvalid)
	}
	return s, nil
}

// NodeAuth signs this node's calls to other nodes and verifies theirs.
type NodeAuth struct {
	node   string
	secret []byte
	clock  func() time.Time
}

// NewNodeAuth returns the signer and verifier of node, with the cluster
// secret (at least MinSecretBytes; LoadSecret reads it). clock is this
// node's clock (nil: time.Now).
func NewNodeAuth(node string, secret []byte, clock func() time.Time) (*NodeAuth, error) {
	if err := checkNodeName(node); err != nil {
		return nil, fmt.Errorf("node auth: %w", err)
	}
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("node auth: the cluster secret has %d bytes, fewer than %d: %w", len(secret), MinSecretBytes, errs.ErrInvalid)
	}
	if clock == nil {
		clock = time.Now
	}
	return &NodeAuth{node: node, secret: append([]byte(nil), secret...), clock: clock}, nil
}

// Node is the name this NodeAuth signs as.
func (a *NodeAuth) Node() string { return a.node }

// checkNodeName refuses a node name that cannot be carried in a header and
// a signed line: empty, too long, or with a control character or a space.
func checkNodeName(node string) error {
	if node == "" || len(node) > maxNodeName {
		return fmt.Errorf("node name %q: want 1 to %d characters: %w", node, maxNodeName, errs.ErrInvalid)
	}
	for i := 0; i < len(node); i++ {
		if c := node[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("node name %q: no spaces or control characters: %w", node, errs.ErrInvalid)
		}
	}
	return nil
}

// Sign sets r's node-call headers: r comes from this node, now. It
// replaces any node-call headers r carried. Sign it after its URL, method
// and credential headers are final.
func (a *NodeAuth) Sign(r *http.Request) {
	ts := strconv.FormatInt(a.clock().Unix(), 10)
	r.Header.Set(HeaderNode, a.node)
	r.Header.Set(HeaderNodeTime, ts)
	r.Header.Set(HeaderNodeSignature, hex.EncodeToString(a.mac(r.Method, r.URL.RequestURI(), a.node, ts, r.Header)))
}

// mac is the signature of one request.
func (a *NodeAuth) mac(method, uri, node, ts string, h http.Header) []byte {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte(signatureDomain + "\n" + method + "\n" + uri + "\n" + node + "\n" + ts + "\n"))
	m.Write([]byte(hex.EncodeToString(credentialHash(h))))
	return m.Sum(nil)
}

// credentialHeaders are the headers whose values a signature binds.
var credentialHeaders = []string{"Authorization", "X-Api-Key", client.TenantHeader}

// credentialHash is the SHA-256 of the credential headers' values, each
// name and value length-prefixed so that no two header sets hash alike.
func credentialHash(h http.Header) []byte {
	d := sha256.New()
	for _, name := range credentialHeaders {
		vs := h.Values(name)
		writeField(d, name)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(vs)))
		d.Write(n[:])
		for _, v := range vs {
			writeField(d, v)
		}
	}
	return d.Sum(nil)
}

// writeField writes s with its length in front.
func writeField(d hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	d.Write(n[:])
	d.Write([]byte(s))
}

// nodeHeaders are a request's node-call headers, parsed.
type nodeHeaders struct {
	node string
	ts   int64
	// tsText is the time as sent (the signed text).
	tsText string
	sig    []byte
}

// parseNodeHeaders parses the node-call headers of h: present is false
// when h carries none of them; an error (wrapping errs.ErrUnauthenticated)
// when it carries some that are missing, repeated or malformed.
func parseNodeHeaders(h http.Header) (nodeHeaders, bool, error) {
	nodes, times, sigs := h.Values(HeaderNode), h.Values(HeaderNodeTime), h.Values(HeaderNodeSignature)
	if len(nodes) == 0 && len(times) == 0 && len(sigs) == 0 {
		return nodeHeaders{}, false, nil
	}
	bad := func(format string, a ...any) (nodeHeaders, bool, error) {
		return nodeHeaders{}, true, fmt.Errorf("node call refused: "+format+": %w", append(a, errs.ErrUnauthenticated)...)
	}
	if len(nodes) != 1 || len(times) != 1 || len(sigs) != 1 {
		return bad("%s, %s and %s must each be sent once", HeaderNode, HeaderNodeTime, HeaderNodeSignature)
	}
	var p nodeHeaders
	p.node = nodes[0]
	if err := checkNodeName(p.node); err != nil {
		return bad("%s: %v", HeaderNode, errs.Message(err))
	}
	p.tsText = times[0]
	ts, err := strconv.ParseInt(p.tsText, 10, 64)
	if err != nil || p.tsText != strconv.FormatInt(ts, 10) {
		return bad("%s %q is not a unix time in seconds", HeaderNodeTime, truncate(p.tsText, 40))
	}
	p.ts = ts
	if len(sigs[0]) != 2*sha256.Size {
		return bad("%s must be %d hex digits", HeaderNodeSignature, 2*sha256.Size)
	}
	if p.sig, err = hex.DecodeString(sigs[0]); err != nil {
		return bad("%s must be %d hex digits", HeaderNodeSignature, 2*sha256.Size)
	}
	return p, true, nil
}

// truncate shortens s for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Verify checks r's node-call headers. It returns "" and nil when r
// carries none (a client's call); the calling node's name when they
// verify; and an error wrapping errs.ErrUnauthenticated when r carries
// them and they are malformed, stale (outside SignatureWindow of this
// node's clock) or not signed with the cluster secret for this very
// method, path, query and credentials.
func (a *NodeAuth) Verify(r *http.Request) (string, error) {
	p, present, err := parseNodeHeaders(r.Header)
	if !present || err != nil {
		return "", err
	}
	now := a.clock()
	skew := now.Sub(time.Unix(p.ts, 0))
	if skew > SignatureWindow || skew < -SignatureWindow {
		return "", fmt.Errorf("node call from %s refused: its signature time is %s off this node's clock (at most %s is accepted): check that the nodes' clocks agree (NTP): %w",
			p.node, skew.Round(time.Second).Abs(), SignatureWindow, errs.ErrUnauthenticated)
	}
	want := a.mac(r.Method, r.URL.RequestURI(), p.node, p.tsText, r.Header)
	if !hmac.Equal(want, p.sig) {
		return "", fmt.Errorf("node call from %s refused: bad signature (the nodes must share one cluster secret): %w", p.node, errs.ErrUnauthenticated)
	}
	return p.node, nil
}

// callingNodeKey is the context key of a verified calling node's name.
type callingNodeKey struct{}

// WithCallingNode returns ctx saying the request was a verified call of
// node.
func WithCallingNode(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, callingNodeKey{}, node)
}

// CallingNode returns the name of the node whose verified call ctx
// belongs to (set by RequireNode, or by the API when it serves a
// forwarded request).
func CallingNode(ctx context.Context) (string, bool) {
	n, ok := ctx.Value(callingNodeKey{}).(string)
	return n, ok && n != ""
}

// RequireNode serves next only for verified node calls (with the calling
// node in the request's context, see CallingNode); anything else is
// refused with 401 problem+json. It guards the node-only routes (the
// failover coordinator's calls).
func (a *NodeAuth) RequireNode(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, err := a.Verify(r)
		if err == nil && node == "" {
			err = fmt.Errorf("%s %s is a node-to-node route: only a call signed with the cluster secret is served: %w", r.Method, r.URL.Path, errs.ErrUnauthenticated)
		}
		if err != nil {
			WriteProblem(w, http.StatusUnauthorized, errs.Message(err))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithCallingNode(r.Context(), node)))
	})
}

package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// requestHead is what the proxy needs of an HTTP/1.x request head.
type requestHead struct {
	Method string
	// Name is the request's host in canonical form without a port: the
	// authority of an absolute-form or CONNECT target, else the Host
	// header's; "" when the request names none.
	Name string
	// ContentLength is the body's length (-1: none given).
	ContentLength int64
	// Chunked: the body is chunked.
	Chunked bool
	// Upgrade is the Upgrade header ("" without one).
	Upgrade string
}

// switches reports whether the connection may stop being HTTP/1 after
// this request (a 101 to an Upgrade, a 2xx to a CONNECT).
func (h requestHead) switches() bool { return h.Method == "CONNECT" || h.Upgrade != "" }

// errMalformed wraps every error of parseRequestHead.
var errMalformed = errors.New("malformed HTTP request")

var crlfcrlf = []byte("\r\n\r\n")

// parseRequestHead parses a request head: the request line and header
// lines, each ending in CRLF, then an empty line (b holds exactly that).
// It is strict where a lenient server and the proxy could disagree on
// where a request ends or which host it names: bare CR or LF, folded
// lines, whitespace before a colon, two Host headers, Content-Length
// with Transfer-Encoding, a Transfer-Encoding other than "chunked", or
// an HTTP version other than 1.0 and 1.1 are errors.
func parseRequestHead(b []byte) (requestHead, error) {
	h := requestHead{ContentLength: -1}
	if !bytes.HasSuffix(b, crlfcrlf) {
		return h, fmt.Errorf("%w: head does not end in an empty line", errMalformed)
	}
	lines := strings.Split(string(b[:len(b)-len(crlfcrlf)]), "\r\n")
	for _, l := range lines {
		if strings.ContainsAny(l, "\r\n\x00") {
			return h, fmt.Errorf("%w: bare CR, LF or NUL", errMalformed)
		}
	}
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !isToken(parts[0]) || parts[1] == "" {
		return h, fmt.Errorf("%w: request line", errMalformed)
	}
	h.Method = parts[0]
	target, proto := parts[1], parts[2]
	if proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return h, fmt.Errorf("%w: version %q", errMalformed, proto)
	}
	for i := 0; i < len(target); i++ {
		if target[i] <= ' ' || target[i] >= 0x7f {
			return h, fmt.Errorf("%w: request target", errMalformed)
		}
	}
	var (
		hosts    []string
		te       []string
		cl       string
		clSeen   bool
		upgrades []string
	)
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !isToken(name) {
			return h, fmt.Errorf("%w: header line", errMalformed)
		}
		value = strings.Trim(value, " \t")
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
				return h, fmt.Errorf("%w: control byte in header %s", errMalformed, name)
			}
		}
		switch strings.ToLower(name) {
		case "host":
			hosts = append(hosts, value)
		case "content-length":
			if clSeen && value != cl {
				return h, fmt.Errorf("%w: two Content-Length values", errMalformed)
			}
			cl, clSeen = value, true
		case "transfer-encoding":
			te = append(te, value)
		case "upgrade":
			upgrades = append(upgrades, value)
		}
	}
	if len(hosts) > 1 {
		return h, fmt.Errorf("%w: two Host headers", errMalformed)
	}
	if len(upgrades) > 0 {
		h.Upgrade = strings.Join(upgrades, ", ")
	}
	switch {
	case len(te) > 0 && clSeen:
		return h, fmt.Errorf("%w: Content-Length and Transfer-Encoding", errMalformed)
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") || proto != "HTTP/1.1" {
			return h, fmt.Errorf("%w: Transfer-Encoding %q", errMalformed, strings.Join(te, ", "))
		}
		h.Chunked = true
	case clSeen:
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 || strings.TrimLeft(cl, "0123456789") != "" {
			return h, fmt.Errorf("%w: Content-Length %q", errMalformed, cl)
		}
		h.ContentLength = n
	}

	var hostHeader, targetHost string
	var err error
	if len(hosts) == 1 && hosts[0] != "" {
		if hostHeader, err = hostOf(hosts[0]); err != nil {
			return h, fmt.Errorf("%w: Host: %w", errMalformed, err)
		}
	}
	switch {
	case h.Method == "CONNECT":
		if targetHost, err = hostOf(target); err != nil || !strings.Contains(target, ":") {
			return h, fmt.Errorf("%w: CONNECT target", errMalformed)
		}
	case target == "*":
		if h.Method != "OPTIONS" {
			return h, fmt.Errorf("%w: * target", errMalformed)
		}
	case target[0] == '/':
	default:
		scheme, rest, ok := strings.Cut(target, "://")
		if !ok || !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
			return h, fmt.Errorf("%w: request target", errMalformed)
		}
		auth, _, _ := strings.Cut(rest, "/")
		auth, _, _ = strings.Cut(auth, "?")
		if strings.Contains(auth, "@") {
			return h, fmt.Errorf("%w: user info in the request target", errMalformed)
		}
		if targetHost, err = hostOf(auth); err != nil {
			return h, fmt.Errorf("%w: request target: %w", errMalformed, err)
		}
	}
	h.Name = hostHeader
	if targetHost != "" {
		if hostHeader != "" && hostHeader != targetHost {
			return h, fmt.Errorf("%w: Host %q and request target %q differ", errMalformed, hostHeader, targetHost)
		}
		h.Name = targetHost
	}
	return h, nil
}

// hostOf returns the host of host[:port] ([v6]:port for IPv6) checked
// and in canonical form.
func hostOf(hp string) (string, error) {
	host, port := hp, ""
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return "", errors.New("unclosed [")
		}
		a, err := netip.ParseAddr(hp[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Errorf("not an IPv6 address: %q", hp[1:end])
		}
		host, port = a.String(), strings.TrimPrefix(hp[end+1:], ":")
		if hp[end+1:] != "" && !strings.HasPrefix(hp[end+1:], ":") {
			return "", errors.New("bytes after ]")
		}
		if err := checkPort(port); err != nil {
			return "", err
		}
		return host, nil
	}
	if i := strings.LastIndexByte(hp, ':'); i >= 0 {
		host, port = hp[:i], hp[i+1:]
		if err := checkPort(port); err != nil {
			return "", err
		}
	}
	return hostName(host)
}

func checkPort(p string) error {
	if p == "" {
		return nil
	}
	if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 || strings.TrimLeft(p, "0123456789") != "" {
		return fmt.Errorf("bad port %q", p)
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// errHeadTooLarge: no head end within the reader's buffer.
var errHeadTooLarge = errors.New("HTTP head larger than the proxy reads")

// peekHead returns the head at the start of br (up to and including the
// empty line) without consuming it. The head must fit br's buffer.
func peekHead(br *bufio.Reader) ([]byte, error) {
	n, scanned := 1, 0
	for {
		_, err := br.Peek(n) // waits for n bytes
		b, _ := br.Peek(br.Buffered())
		from := max(0, scanned-len(crlfcrlf)+1)
		if i := bytes.Index(b[from:], crlfcrlf); i >= 0 {
			return b[:from+i+len(crlfcrlf)], nil
		}
		if len(b) >= br.Size() || errors.Is(err, bufio.ErrBufferFull) {
			return nil, errHeadTooLarge
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		scanned = len(b)
		n = len(b) + 1
	}
}

// maxChunkLine bounds a chunk-size line and a trailer line.
const maxChunkLine = 4096

// copyChunked copies a chunked body from br to w, checking its framing
// strictly (CRLF line ends, hex sizes, CRLF after each chunk), trailers
// included.
func copyChunked(w io.Writer, br *bufio.Reader) error {
	for {
		line, err := readCRLFLine(br)
		if err != nil {
			return err
		}
		sz, _, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), ";")
		if sz == "" || len(sz) > 15 || strings.Trim(sz, "0123456789abcdefABCDEF") != "" {
			return fmt.Errorf("%w: chunk size %q", errMalformed, sz)
		}
		n, _ := strconv.ParseInt(sz, 16, 64)
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if _, err := io.CopyN(w, br, n); err != nil {
			return err
		}
		end, err := br.Peek(2)
		if err != nil {
			return err
		}
		if string(end) != "\r\n" {
			return fmt.Errorf("%w: no CRLF after a chunk", errMalformed)
		}
		if _, err := w.Write(end); err != nil {
			return err
		}
		br.Discard(2)
	}
	total := 0
	for {
		line, err := readCRLFLine(br)
		if err != nil {
			return err
		}
		if total += len(line); total > maxPeek {
			return fmt.Errorf("%w: trailers too large", errMalformed)
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
		if line == "\r\n" {
			return nil
		}
		if name, _, ok := strings.Cut(line, ":"); !ok || !isToken(name) {
			return fmt.Errorf("%w: trailer line", errMalformed)
		}
	}
}

// readCRLFLine reads one line ending in CRLF, with no other CR or LF, of
// at most maxChunkLine bytes.
func readCRLFLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(b) > maxChunkLine {
		return "", fmt.Errorf("%w: line too long", errMalformed)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", io.ErrUnexpectedEOF
		}
		return "", err
	}
	if !bytes.HasSuffix(b, []byte("\r\n")) || bytes.IndexByte(b[:len(b)-2], '\r') >= 0 || bytes.IndexByte(b, 0) >= 0 {
		return "", fmt.Errorf("%w: line end", errMalformed)
	}
	return string(b), nil
}

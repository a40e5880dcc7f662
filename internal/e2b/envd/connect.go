package envd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Frame flags of a Connect streaming envelope.
const (
	// FlagCompressed marks a compressed payload (never sent by stead and
	// refused when received: no compression is negotiated).
	FlagCompressed byte = 0x01
	// FlagEndStream marks the last frame of a response stream: its
	// payload is an EndStream message.
	FlagEndStream byte = 0x02
)

// Content types of the Connect protocol with the JSON codec.
const (
	ContentTypeUnary  = "application/json"
	ContentTypeStream = "application/connect+json"
)

// MaxMessageBytes caps one request message (unary body or stream frame).
const MaxMessageBytes = 4 << 20

// ErrFrame is returned for a malformed envelope.
var ErrFrame = errors.New("malformed connect envelope")

// ReadFrame reads one enveloped message (1 byte of flags, 4 bytes of
// big-endian length, the payload) of at most max bytes. A compressed
// frame, a truncated one or one larger than max is ErrFrame; an empty
// reader is io.EOF.
func ReadFrame(r io.Reader, max int) (flags byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("read envelope header: %w", ErrFrame)
	}
	flags = hdr[0]
	if flags&FlagCompressed != 0 {
		return 0, nil, fmt.Errorf("compressed message (no compression was negotiated): %w", ErrFrame)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) {
		return 0, nil, fmt.Errorf("message of %d bytes exceeds %d: %w", n, max, ErrFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("read envelope payload: %w", ErrFrame)
	}
	return flags, payload, nil
}

// WriteFrame writes one enveloped message.
func WriteFrame(w io.Writer, flags byte, payload []byte) error {
	buf := make([]byte, 5+len(payload))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(payload)))
	copy(buf[5:], payload)
	_, err := w.Write(buf)
	return err
}

// Connect error codes (the subset stead sends).
const (
	CodeCanceled           = "canceled"
	CodeUnknown            = "unknown"
	CodeInvalidArgument    = "invalid_argument"
	CodeDeadlineExceeded   = "deadline_exceeded"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodePermissionDenied   = "permission_denied"
	CodeResourceExhausted  = "resource_exhausted"
	CodeFailedPrecondition = "failed_precondition"
	CodeUnimplemented      = "unimplemented"
	CodeInternal           = "internal"
	CodeUnavailable        = "unavailable"
	CodeUnauthenticated    = "unauthenticated"
)

// Error is a Connect error as it travels in a unary error body or in an
// end-of-stream frame.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Error implements error.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// HTTPStatus is the status of a unary response carrying e, as the Connect
// protocol maps codes.
func (e *Error) HTTPStatus() int {
	switch e.Code {
	case CodeCanceled:
		return 499
	case CodeInvalidArgument, CodeFailedPrecondition:
		return http.StatusBadRequest
	case CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case CodeNotFound:
		return http.StatusNotFound
	case CodeAlreadyExists:
		return http.StatusConflict
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeResourceExhausted:
		return http.StatusTooManyRequests
	case CodeUnimplemented:
		return http.StatusNotImplemented
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// EndStream is the payload of the last frame of a response stream.
type EndStream struct {
	Error *Error `json:"error,omitempty"`
}

// WriteUnaryError answers a unary call with e.
func WriteUnaryError(w http.ResponseWriter, e *Error) {
	w.Header().Set("Content-Type", ContentTypeUnary)
	w.WriteHeader(e.HTTPStatus())
	json.NewEncoder(w).Encode(e)
}

// WriteUnary answers a unary call with msg.
func WriteUnary(w http.ResponseWriter, msg any) {
	b, err := json.Marshal(msg)
	if err != nil {
		WriteUnaryError(w, &Error{Code: CodeInternal, Message: "encode the response"})
		return
	}
	w.Header().Set("Content-Type", ContentTypeUnary)
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

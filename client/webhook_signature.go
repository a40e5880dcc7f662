package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Webhook delivery headers. Every delivery is a POST of one DaemonEvent as
// JSON with these headers.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex>": v1 is
	// HMAC-SHA256, keyed with the webhook's secret, over the decimal
	// timestamp, a ".", and the raw request body (the Stripe scheme).
	SignatureHeader = "Stead-Signature"
	// EventIDHeader carries the event's id: at-least-once delivery means a
	// receiver may see an id twice and should ignore the repeat.
	EventIDHeader = "Stead-Event-Id"
	// EventTypeHeader carries the event's type.
	EventTypeHeader = "Stead-Event-Type"
	// WebhookIDHeader names the webhook the delivery is for.
	WebhookIDHeader = "Stead-Webhook-Id"
)

// DefaultSignatureTolerance is how far a signature's timestamp may be from
// the receiver's clock in VerifyWebhook when the caller passes 0.
const DefaultSignatureTolerance = 5 * time.Minute

// ErrBadSignature is returned by VerifyWebhook for every delivery that must
// be refused.
var ErrBadSignature = errors.New("webhook signature does not verify")

// SignWebhook returns the Stead-Signature header value of body signed with
// secret at time t.
func SignWebhook(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(signatureMAC(secret, ts, body))
}

func signatureMAC(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifyWebhook checks a delivery: header is the Stead-Signature value,
// body the raw request body (before any JSON decoding). It succeeds when
// one v1 signature matches (several may be present while a secret is
// rotated) and the timestamp is within tolerance of now (0:
// DefaultSignatureTolerance; negative: not checked), which bounds replays.
// Every failure wraps ErrBadSignature.
func VerifyWebhook(secret, header string, body []byte, tolerance time.Duration) error {
	return verifyWebhookAt(secret, header, body, tolerance, time.Now())
}

func verifyWebhookAt(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance == 0 {
		tolerance = DefaultSignatureTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts != strconv.FormatInt(unix, 10) {
		return fmt.Errorf("no valid t= timestamp in %s: %w", SignatureHeader, ErrBadSignature)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("no v1= signature in %s: %w", SignatureHeader, ErrBadSignature)
	}
	if tolerance > 0 {
		d := now.Sub(time.Unix(unix, 0))
		if d < 0 {
			d = -d
		}
		if d > tolerance {
			return fmt.Errorf("timestamp %d is %s from now, beyond %s: %w", unix, d.Round(time.Second), tolerance, ErrBadSignature)
		}
	}
	want := signatureMAC(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("no v1 signature matches: %w", ErrBadSignature)
}

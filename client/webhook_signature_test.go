package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerifyWebhookAcceptsItsSignatureAndRefusesTampering(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":7,"type":"sandbox.created"}`)
	h := SignWebhook("whsec", now, body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") {
		t.Fatalf("header = %q", h)
	}
	if err := verifyWebhookAt("whsec", h, body, time.Minute, now.Add(30*time.Second)); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	other := SignWebhook("old", now, body)
	rotated := other + "," + strings.Split(h, ",")[1]
	for name, tc := range map[string]struct {
		secret, header string
		body           string
		at             time.Time
		ok             bool
	}{
		"rotation: second v1 matches": {"whsec", rotated, string(body), now, true},
		"no tolerance check":          {"whsec", h, string(body), now.Add(24 * time.Hour), true},
		"body changed":                {"whsec", h, string(body) + " ", now, false},
		"wrong secret":                {"other", h, string(body), now, false},
		"too old":                     {"whsec", h, string(body), now.Add(2 * time.Minute), false},
		"timestamp changed":           {"whsec", strings.Replace(h, "t=1800000000", "t=1800000001", 1), string(body), now, false},
		"no signature":                {"whsec", "t=1800000000", string(body), now, false},
		"empty":                       {"whsec", "", string(body), now, false},
		"padded timestamp":            {"whsec", strings.Replace(h, "t=", "t=0", 1), string(body), now, false},
	} {
		tol := time.Minute
		if name == "no tolerance check" {
			tol = -1
		}
		err := verifyWebhookAt(tc.secret, tc.header, []byte(tc.body), tol, tc.at)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzVerifyWebhook(f *testing.F) {
	f.Add("t=1800000000,v1=00", []byte("{}"))
	f.Add(SignWebhook("k", time.Unix(1_800_000_000, 0), []byte("{}")), []byte("{}"))
	f.Add("t=,v1=,v1=zz,,=,t=-1", []byte(nil))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := verifyWebhookAt("k", header, body, -1, time.Unix(1_800_000_000, 0))
		if err != nil && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("error not wrapping ErrBadSignature: %v", err)
		}
		if err == nil && !strings.Contains(header, "v1=") {
			t.Fatalf("accepted %q without a v1", header)
		}
	})
}

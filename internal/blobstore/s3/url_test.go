package s3

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

func noEnv(string) string { return "" }

func env(access, secret string) func(string) string {
	return func(k string) string {
		switch k {
		case EnvAccessKey:
			return access
		case EnvSecretKey:
			return secret
		}
		return ""
	}
}

func TestParseURLAcceptsDocumentedForms(t *testing.T) {
	tests := []struct {
		raw    string
		getenv func(string) string
		want   Config
	}{
		{
			"s3://AK:SK@127.0.0.1:9000/bucket/prefix?secure=false&region=us-east-1", noEnv,
			Config{Endpoint: "127.0.0.1:9000", Bucket: "bucket", Prefix: "prefix", AccessKey: "AK", SecretKey: "SK", Region: "us-east-1", CredentialSource: SourceURL},
		},
		{
			"s3://AK:S%2FK%40x@s3.example.com/my.bucket/a/b/c/", noEnv,
			Config{Endpoint: "s3.example.com", Bucket: "my.bucket", Prefix: "a/b/c", AccessKey: "AK", SecretKey: "S/K@x", Secure: true, CredentialSource: SourceURL},
		},
		{
			"s3://minio:9000/bkt", env("envA", "envS"),
			Config{Endpoint: "minio:9000", Bucket: "bkt", AccessKey: "envA", SecretKey: "envS", Secure: true, CredentialSource: "environment (STEAD_S3_ACCESS_KEY)"},
		},
		{
			"s3://[::1]:9000/bkt/?secure=0", env("a", "s"),
			Config{Endpoint: "[::1]:9000", Bucket: "bkt", AccessKey: "a", SecretKey: "s", CredentialSource: "environment (STEAD_S3_ACCESS_KEY)"},
		},
		{
			// Credentials in the URL win over the environment.
			"s3://u:p@h/bkt", env("envA", "envS"),
			Config{Endpoint: "h", Bucket: "bkt", AccessKey: "u", SecretKey: "p", Secure: true, CredentialSource: SourceURL},
		},
	}
	for _, tc := range tests {
		got, err := parseURL(tc.raw, tc.getenv)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.raw, err)
			continue
		}
		if got != tc.want {
			t.Errorf("parseURL(%q) = %+v, want %+v", tc.raw, got, tc.want)
		}
	}
}

func TestParseURLRejectsMalformedWithoutLeakingSecret(t *testing.T) {
	bad := []string{
		"", "s3:", "s3://", "http://a:b@h/bucket", "s3://a:b@h", "s3://a:b@h/", "s3://a:b@h/BAD",
		"s3://a:b@h/ab", "s3://a:b@h/bucket/a//b", "s3://a:b@h/bucket/../x", "s3://a:b@h/bucket/sp ace",
		"s3://a:b@h:0/bucket", "s3://a:b@h:99999/bucket", "s3://a:b@h:/bucket", "s3://a:b@h:x/bucket",
		"s3://a:b@h/bucket?secure=maybe", "s3://a:b@h/bucket?regoin=x", "s3://a:b@h/bucket?secure=1&secure=0",
		"s3://a:b@h/bucket?region=", "s3://a:b@h/bucket#frag", "s3://a@h/bucket", "s3://:b@h/bucket",
		"s3://h/bucket", "s3:opaque/bucket", "s3://a:b@h%20x/bucket", "s3://a:b@h/bucket?%zz",
		"s3://a:TOPSECRET%zz@h/bucket", "s3://a:b@h/-bucket", "s3://a:b@h/bucket-",
	}
	for _, raw := range bad {
		cfg, err := parseURL(raw, noEnv)
		if err == nil {
			t.Errorf("parseURL(%q) = %+v, want an error", raw, cfg)
			continue
		}
		if !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("parseURL(%q): err = %v, want ErrInvalid", raw, err)
		}
		if strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("parseURL(%q): error leaks the secret: %v", raw, err)
		}
	}
}

func TestConfigLocationOmitsCredentials(t *testing.T) {
	cfg := Config{Endpoint: "h:1", Bucket: "bkt", Prefix: "p", AccessKey: "AK", SecretKey: "SK"}
	if got := cfg.Location(); got != "s3://h:1/bkt/p" {
		t.Fatalf("Location() = %q", got)
	}
}

// formatURL is ParseURL's inverse, for the round-trip property.
func formatURL(c Config) string {
	u := url.URL{Scheme: "s3", User: url.UserPassword(c.AccessKey, c.SecretKey), Host: c.Endpoint, Path: "/" + c.Bucket}
	if c.Prefix != "" {
		u.Path += "/" + c.Prefix
	}
	q := url.Values{"secure": {strconv.FormatBool(c.Secure)}}
	if c.Region != "" {
		q.Set("region", c.Region)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// FuzzParseURL checks that no input panics, that every accepted URL yields a
// usable Config (the same checks New makes), and that formatting and parsing
// it again gives the same Config.
func FuzzParseURL(f *testing.F) {
	for _, seed := range []string{
		"s3://AK:SK@127.0.0.1:9000/bucket/prefix?secure=false&region=us-east-1",
		"s3://AK:S%2FK@s3.example.com/my.bucket/a/b/c/",
		"s3://minio:9000/bkt",
		"s3://[::1]:9000/bkt/?secure=0",
		"s3://a:b@h/bucket?secure=1&secure=0",
		"s3://a:b@h:99999/bucket",
		"s3://a:b@h/bucket/../x",
		"s3://a:TOPSECRET%zz@h/bucket",
		"http://x/y",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := parseURL(raw, env("ea", "es"))
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("parseURL(%q): err = %v, want ErrInvalid", raw, err)
			}
			return
		}
		if err := validate(cfg); err != nil {
			t.Fatalf("parseURL(%q) = %+v, which New would reject: %v", raw, cfg, err)
		}
		again, err := parseURL(formatURL(cfg), noEnv)
		if err != nil {
			t.Fatalf("parseURL(formatURL(%+v)) = %v (url %q, from %q)", cfg, err, formatURL(cfg), raw)
		}
		cfg.CredentialSource, again.CredentialSource = "", "" // env first, then the url
		if again != cfg {
			t.Fatalf("round trip of %q: %+v, then %+v", raw, cfg, again)
		}
	})
}

func TestValidBucket(t *testing.T) {
	for name, want := range map[string]bool{
		"abc": true, "a.b-c9": true, "ab": false, strings.Repeat("a", 63): true, strings.Repeat("a", 64): false,
		"Abc": false, "a_b": false, "-ab": false, "ab-": false, "a..b": false, ".ab": false, "9ab": true,
	} {
		if got := ValidBucket(name); got != want {
			t.Errorf("ValidBucket(%q) = %v, want %v", name, got, want)
		}
	}
}

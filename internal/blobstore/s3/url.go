package s3

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
)

// Environment variables ParseURL reads the credentials from when the URL
// carries none.
const (
	EnvAccessKey = "STEAD_S3_ACCESS_KEY"
	EnvSecretKey = "STEAD_S3_SECRET_KEY"
)

// ParseURL parses a store URL of the form
//
//	s3://ACCESS:SECRET@host:port/bucket/prefix?secure=false&region=us-east-1
//
// The prefix is optional (and then the store uses the whole bucket); a
// trailing '/' is ignored. Query parameters, both optional: secure (a Go
// boolean, default true: HTTPS) and region (default empty: ask the server).
// Any other parameter is an error, so a typo is never silently ignored.
//
// Credentials in the URL must be percent-encoded where needed. When the URL
// has no user information, the access key and secret key come from the
// environment variables STEAD_S3_ACCESS_KEY and STEAD_S3_SECRET_KEY, which
// keeps them out of command lines and process listings. Either way both must
// be set. Every error wraps errs.ErrInvalid and never echoes the secret.
func ParseURL(raw string) (Config, error) {
	return parseURL(raw, os.Getenv)
}

func parseURL(raw string, getenv func(string) string) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("parse s3 url: "+format+": %w", append(args, errs.ErrInvalid)...)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the input, and its detail may quote part of the
		// secret: give the detail only when there are no credentials.
		var ue *url.Error
		if !strings.Contains(raw, "@") && errors.As(err, &ue) {
			return bad("%v", ue.Err)
		}
		return bad("malformed url (percent-encode special characters in the credentials)")
	}
	if u.Scheme != "s3" {
		return bad("scheme %q, want s3://", u.Scheme)
	}
	if u.Opaque != "" || u.Fragment != "" || u.RawFragment != "" {
		return bad("want s3://[ACCESS:SECRET@]host[:port]/bucket[/prefix]")
	}
	var cfg Config
	if !validHost(u.Hostname()) {
		return bad("host %q: want a DNS name or IP address", u.Hostname())
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || p[0] == '0' {
			return bad("port %q", p)
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return bad("empty port")
	}
	cfg.Endpoint = u.Host

	path := strings.TrimPrefix(u.Path, "/")
	bucket, prefix, _ := strings.Cut(path, "/")
	if !ValidBucket(bucket) {
		return bad("bucket %q: want 3-63 of [a-z0-9.-], starting and ending with a letter or digit", bucket)
	}
	cfg.Bucket = bucket
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" && !blobstore.ValidKey(prefix) {
		return bad("prefix %q: want '/'-separated segments of [a-zA-Z0-9._-]", prefix)
	}
	cfg.Prefix = prefix

	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	cfg.Secure = true
	for k, vs := range q {
		if len(vs) != 1 {
			return bad("query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "secure":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("secure=%q: want true or false", v)
			}
			cfg.Secure = b
		case "region":
			if !validRegion(v) {
				return bad("region %q: want up to 64 of [a-zA-Z0-9._-]", v)
			}
			cfg.Region = v
		default:
			return bad("unknown query parameter %q (known: secure, region)", k)
		}
	}

	if u.User != nil {
		cfg.AccessKey = u.User.Username()
		cfg.SecretKey, _ = u.User.Password()
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return bad("credentials in the url must be ACCESS:SECRET@, both non-empty")
		}
	} else {
		cfg.AccessKey, cfg.SecretKey = getenv(EnvAccessKey), getenv(EnvSecretKey)
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return bad("no credentials: put ACCESS:SECRET@ in the url or set %s and %s", EnvAccessKey, EnvSecretKey)
		}
	}
	return cfg, nil
}

// validHost accepts a DNS name of [a-zA-Z0-9.-_] (up to 253 bytes) or an IP
// address.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if net.ParseIP(h) != nil {
		return true
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

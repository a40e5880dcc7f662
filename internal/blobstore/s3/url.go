package s3

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
)

// Environment variables the credentials are read from when the URL
// carries none (see ParseURL).
const (
	EnvAccessKey       = "STEAD_S3_ACCESS_KEY"
	EnvSecretKey       = "STEAD_S3_SECRET_KEY"
	EnvSessionToken    = "STEAD_S3_SESSION_TOKEN"
	EnvCredentialsFile = "STEAD_S3_CREDENTIALS_FILE"

	EnvAWSAccessKey       = "AWS_ACCESS_KEY_ID"
	EnvAWSSecretKey       = "AWS_SECRET_ACCESS_KEY"
	EnvAWSSessionToken    = "AWS_SESSION_TOKEN"
	EnvAWSCredentialsFile = "AWS_SHARED_CREDENTIALS_FILE"
	EnvAWSProfile         = "AWS_PROFILE"
)

// Where the credentials of a Config came from (Config.CredentialSource).
const (
	SourceURL = "url"
)

// ParseURL parses a store URL of the form
//
//	s3://host:port/bucket/prefix?secure=false&region=us-east-1
//
// The prefix is optional (and then the store uses the whole bucket); a
// trailing '/' is ignored. Query parameters, both optional: secure (a Go
// boolean, default true: HTTPS) and region (default empty: ask the server).
// Any other parameter is an error, so a typo is never silently ignored.
//
// The credentials are looked up as every S3 client does, first found wins:
//
//  1. the URL's user information, s3://ACCESS:SECRET@host/... (it works,
//     but it is in every process listing when given on a command line:
//     Config.CredentialSource is SourceURL so the caller can warn);
//  2. STEAD_S3_ACCESS_KEY and STEAD_S3_SECRET_KEY (and STEAD_S3_SESSION_TOKEN);
//  3. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN);
//  4. a stead credentials file, opts.CredentialsFile or
//     STEAD_S3_CREDENTIALS_FILE, which must not be readable by group or
//     others (0600);
//  5. the shared AWS credentials file, AWS_SHARED_CREDENTIALS_FILE or
//     ~/.aws/credentials, when it exists.
//
// Both files are in the AWS format: a [profile] section (AWS_PROFILE, else
// "default") with aws_access_key_id, aws_secret_access_key and optionally
// aws_session_token. Credentials in the URL must be percent-encoded where
// needed. Every error wraps errs.ErrInvalid and never echoes the secret.
func ParseURL(raw string) (Config, error) {
	return Parse(raw, Options{})
}

// Options says where Parse looks for credentials besides the URL.
type Options struct {
	// CredentialsFile is a stead credentials file (AWS format, 0600); ""
	// reads STEAD_S3_CREDENTIALS_FILE.
	CredentialsFile string
	// Getenv reads the environment (nil: os.Getenv); HOME comes from it too.
	Getenv func(string) string
}

// Parse is ParseURL with explicit credential sources.
func Parse(raw string, opts Options) (Config, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg, err := parseLocation(raw)
	if err != nil || cfg.CredentialSource == SourceURL {
		return cfg, err
	}
	if cfg.AccessKey, cfg.SecretKey, cfg.SessionToken, cfg.CredentialSource, err = lookupCredentials(getenv, opts.CredentialsFile); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// lookupCredentials finds credentials in the environment and the
// credentials files (steps 2 to 5 of ParseURL).
func lookupCredentials(getenv func(string) string, file string) (access, secret, token, source string, err error) {
	bad := func(format string, args ...any) (string, string, string, string, error) {
		return "", "", "", "", fmt.Errorf("s3 credentials: "+format+": %w", append(args, errs.ErrInvalid)...)
	}
	for _, e := range [][3]string{{EnvAccessKey, EnvSecretKey, EnvSessionToken}, {EnvAWSAccessKey, EnvAWSSecretKey, EnvAWSSessionToken}} {
		a, s := getenv(e[0]), getenv(e[1])
		if a == "" && s == "" {
			continue
		}
		if a == "" || s == "" {
			return bad("%s and %s must be set together", e[0], e[1])
		}
		return a, s, getenv(e[2]), "environment (" + e[0] + ")", nil
	}
	profile := getenv(EnvAWSProfile)
	if profile == "" {
		profile = "default"
	}
	if file == "" {
		file = getenv(EnvCredentialsFile)
	}
	if file != "" {
		fi, err := os.Stat(file)
		if err != nil {
			return bad("credentials file %s: %v", file, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return bad("credentials file %s is readable by others (mode %v): chmod 600 it", file, fi.Mode().Perm())
		}
		return readCredentialsFile(file, profile)
	}
	shared := getenv(EnvAWSCredentialsFile)
	if shared == "" {
		if home := getenv("HOME"); home != "" {
			shared = filepath.Join(home, ".aws", "credentials")
		}
	}
	if shared != "" {
		if _, err := os.Stat(shared); err == nil {
			return readCredentialsFile(shared, profile)
		}
	}
	return bad("none found: set %s and %s (or %s and %s), or name a credentials file (--repo-credentials-file, %s, or ~/.aws/credentials); credentials in the url (s3://ACCESS:SECRET@...) work but show in process listings",
		EnvAWSAccessKey, EnvAWSSecretKey, EnvAccessKey, EnvSecretKey, EnvCredentialsFile)
}

// readCredentialsFile reads profile's keys from an AWS-format credentials
// file.
func readCredentialsFile(path, profile string) (access, secret, token, source string, err error) {
	bad := func(format string, args ...any) (string, string, string, string, error) {
		return "", "", "", "", fmt.Errorf("s3 credentials file %s: "+format+": %w", append([]any{path}, append(args, errs.ErrInvalid)...)...)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return bad("%v", err)
	}
	section, found := "", false
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(strings.TrimPrefix(line[1:len(line)-1], "profile "))
			found = found || section == profile
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return bad("line %d: want key = value", n+1) // never quote the line: it may be a secret
		}
		if section != profile {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "aws_access_key_id":
			access = strings.TrimSpace(v)
		case "aws_secret_access_key":
			secret = strings.TrimSpace(v)
		case "aws_session_token":
			token = strings.TrimSpace(v)
		}
	}
	if !found {
		return bad("no [%s] profile", profile)
	}
	if access == "" || secret == "" {
		return bad("profile [%s] needs aws_access_key_id and aws_secret_access_key", profile)
	}
	return access, secret, token, "file " + path + " [" + profile + "]", nil
}

// URL returns the store's URL without credentials, for another process
// (which gets the credentials through its environment: Env).
func (c Config) URL() string {
	u := url.URL{Scheme: "s3", Host: c.Endpoint, Path: "/" + c.Bucket}
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

// Env returns environ without any S3 credential variable, plus the
// config's credentials as STEAD_S3_*: what a child process given URL()
// needs, without a secret on its command line.
func (c Config) Env(environ []string) []string {
	out := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case EnvAccessKey, EnvSecretKey, EnvSessionToken, EnvCredentialsFile,
			EnvAWSAccessKey, EnvAWSSecretKey, EnvAWSSessionToken, EnvAWSCredentialsFile, EnvAWSProfile:
			continue
		}
		out = append(out, kv)
	}
	out = append(out, EnvAccessKey+"="+c.AccessKey, EnvSecretKey+"="+c.SecretKey)
	if c.SessionToken != "" {
		out = append(out, EnvSessionToken+"="+c.SessionToken)
	}
	return out
}

// parseURL is Parse with getenv as the environment (for tests).
func parseURL(raw string, getenv func(string) string) (Config, error) {
	return Parse(raw, Options{Getenv: getenv})
}

// parseLocation parses everything but the credentials that do not come
// from the URL itself.
func parseLocation(raw string) (Config, error) {
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
		cfg.CredentialSource = SourceURL
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

package s3

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestParseTakesCredentialsFromEnvironmentAndFiles: without credentials in
// the URL, the keys come from STEAD_S3_*, then AWS_*, then a stead
// credentials file (refused unless 0600), then ~/.aws/credentials (with
// AWS_PROFILE); none of them is ever needed on a command line.
func TestParseTakesCredentialsFromEnvironmentAndFiles(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".aws"), 0o700)
	shared := filepath.Join(home, ".aws", "credentials")
	if err := os.WriteFile(shared, []byte("# aws cli\n[default]\naws_access_key_id = DA\naws_secret_access_key = DS\n\n[profile work]\naws_access_key_id=WA\naws_secret_access_key=WS\naws_session_token=WT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	steadFile := filepath.Join(t.TempDir(), "s3.credentials")
	if err := os.WriteFile(steadFile, []byte("[default]\naws_access_key_id = FA\naws_secret_access_key = FS\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const raw = "s3://127.0.0.1:9000/bkt/p?secure=false"
	tests := []struct {
		name               string
		env                map[string]string
		file               string
		access, secret, tk string
		source             string
	}{
		{"stead env", map[string]string{EnvAccessKey: "SA", EnvSecretKey: "SS", EnvAWSAccessKey: "AA", EnvAWSSecretKey: "AS", "HOME": home}, "", "SA", "SS", "", "environment (STEAD_S3_ACCESS_KEY)"},
		{"aws env", map[string]string{EnvAWSAccessKey: "AA", EnvAWSSecretKey: "AS", EnvAWSSessionToken: "AT", "HOME": home}, steadFile, "AA", "AS", "AT", "environment (AWS_ACCESS_KEY_ID)"},
		{"stead file", map[string]string{"HOME": home}, steadFile, "FA", "FS", "", "file " + steadFile + " [default]"},
		{"stead file from env", map[string]string{EnvCredentialsFile: steadFile, "HOME": home}, "", "FA", "FS", "", "file " + steadFile + " [default]"},
		{"shared file", map[string]string{"HOME": home}, "", "DA", "DS", "", "file " + shared + " [default]"},
		{"shared file profile", map[string]string{"HOME": home, EnvAWSProfile: "work"}, "", "WA", "WS", "WT", "file " + shared + " [work]"},
		{"shared file named", map[string]string{EnvAWSCredentialsFile: shared}, "", "DA", "DS", "", "file " + shared + " [default]"},
	}
	for _, tc := range tests {
		cfg, err := Parse(raw, Options{Getenv: envMap(tc.env), CredentialsFile: tc.file})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if cfg.AccessKey != tc.access || cfg.SecretKey != tc.secret || cfg.SessionToken != tc.tk || cfg.CredentialSource != tc.source {
			t.Errorf("%s: got %s/%s/%s from %q", tc.name, cfg.AccessKey, cfg.SecretKey, cfg.SessionToken, cfg.CredentialSource)
		}
		if cfg.Endpoint != "127.0.0.1:9000" || cfg.Bucket != "bkt" || cfg.Prefix != "p" || cfg.Secure {
			t.Errorf("%s: location %+v", tc.name, cfg)
		}
	}

	// Refusals: a stead file others can read, half a pair, nothing at all,
	// a missing profile. No error quotes a secret.
	loose := filepath.Join(t.TempDir(), "loose")
	os.WriteFile(loose, []byte("[default]\naws_access_key_id = LA\naws_secret_access_key = TOPSECRET\n"), 0o644)
	for name, o := range map[string]Options{
		"loose file":   {CredentialsFile: loose, Getenv: envMap(nil)},
		"half env":     {Getenv: envMap(map[string]string{EnvAWSAccessKey: "AA"})},
		"nothing":      {Getenv: envMap(map[string]string{"HOME": t.TempDir()})},
		"no profile":   {Getenv: envMap(map[string]string{"HOME": home, EnvAWSProfile: "nope"})},
		"missing file": {CredentialsFile: filepath.Join(home, "absent"), Getenv: envMap(nil)},
	} {
		_, err := Parse(raw, o)
		if !errors.Is(err, errs.ErrInvalid) || strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestConfigURLAndEnvCarryNoSecretInArguments: what a child process is
// given: a URL without credentials, and an environment with exactly the
// parent's credentials (whatever the parent's source was).
func TestConfigURLAndEnvCarryNoSecretInArguments(t *testing.T) {
	cfg, err := Parse("s3://AK:TOPSECRET@127.0.0.1:9000/bkt/p?secure=false&region=us-east-1", Options{Getenv: envMap(nil)})
	if err != nil || cfg.CredentialSource != SourceURL {
		t.Fatalf("%+v %v", cfg, err)
	}
	u := cfg.URL()
	if strings.Contains(u, "TOPSECRET") || strings.Contains(u, "AK") {
		t.Fatalf("URL() = %q", u)
	}
	env := cfg.Env([]string{"PATH=/bin", "AWS_SECRET_ACCESS_KEY=old", "AWS_PROFILE=x", "STEAD_S3_SECRET_KEY=old"})
	slices.Sort(env)
	want := []string{"PATH=/bin", "STEAD_S3_ACCESS_KEY=AK", "STEAD_S3_SECRET_KEY=TOPSECRET"}
	if !slices.Equal(env, want) {
		t.Fatalf("Env() = %q", env)
	}
	again, err := Parse(u, Options{Getenv: envMap(map[string]string{EnvAccessKey: "AK", EnvSecretKey: "TOPSECRET"})})
	if err != nil {
		t.Fatal(err)
	}
	again.CredentialSource = SourceURL
	if again != cfg {
		t.Fatalf("the child parses %+v, the parent had %+v", again, cfg)
	}
}

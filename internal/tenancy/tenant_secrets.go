package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Tenant secrets (stead secret set|ls|rm; sandboxes reference them with
// create --secret and --secret-file).
//
// A value is sealed with AES-256-GCM under a key derived (HKDF-SHA256,
// tenantSecretPurpose) from the daemon's secrets key file (DATA/secrets.key,
// beside the repository's master key; the same file that seals the
// environment given at create, internal/sandbox/secrets.go), with the
// tenant and the name as associated data: the store holds ciphertext only,
// and a row copied to another name or tenant does not open.
//
// A sandbox's spec holds references (client.SecretRef: a name, and the
// variable or file that gets the value), never a value, so its snapshots,
// forks and pushes carry names only. Values are opened on the node where a
// sandbox starts (internal/sandbox/secret_mounts.go: into the runtime's
// environment, handed to init in a sealed memory file, and into files on
// a tmpfs made for the start) and where an exec starts (its environment,
// over init's socket). Hence a rotation reaches every exec at once, and
// the service and the files at the next start.
//
// A secret a sandbox references cannot be deleted (errs.ErrConflict naming
// the sandboxes, soft-deleted ones included); a sandbox whose secret is
// missing anyway (restored from another daemon's push) fails to start with
// an error naming it, and starts once the secret is set.

var _ api.SecretBackend = (*Service)(nil)

// tenantSecretPurpose is the HKDF info of the key that seals tenant secrets.
const tenantSecretPurpose = "stead tenant secrets v1"

// sealedSecretVersion is the first byte of a sealed secret: version 1 is
// followed by the GCM nonce and the ciphertext.
const sealedSecretVersion = 1

// Limits of a secret.
const (
	maxSecretName  = 128
	maxSecretValue = 64 << 10
)

// SecretFileDir is where file secrets appear inside a sandbox: a tmpfs
// made for each start, read-only, never on the sandbox's disk.
const SecretFileDir = "/run/secrets"

// secretAD binds a sealed value to its tenant and name.
func secretAD(tenant, name string) []byte {
	return []byte("stead tenant secret v1\x00" + tenant + "\x00" + name)
}

// validEnvName reports whether n is an environment variable name as a
// shell takes it: [A-Za-z_][A-Za-z0-9_]*, at most 128 bytes.
func validEnvName(n string) bool {
	if n == "" || len(n) > maxSecretName {
		return false
	}
	for i, c := range n {
		ok := c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

func checkSecretName(n string) error {
	if !validEnvName(n) {
		return fmt.Errorf("secret name %q: use letters, digits and underscores, not starting with a digit, at most %d (an environment variable name): %w", n, maxSecretName, errs.ErrInvalid)
	}
	return nil
}

// sealSecret seals value for the tenant's secret name.
func (s *Service) sealSecret(tenant, name, value string) ([]byte, error) {
	aead, err := s.secrets.Derive(tenantSecretPurpose, true)
	if err != nil {
		return nil, fmt.Errorf("seal secret %s: %w", name, err)
	}
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(value)+aead.Overhead())
	out[0] = sealedSecretVersion
	rand.Read(out[1:])
	return aead.Seal(out, out[1:], []byte(value), secretAD(tenant, name)), nil
}

// openSecret opens a sealed secret of the tenant.
func (s *Service) openSecret(sec store.Secret) (string, error) {
	aead, err := s.secrets.Derive(tenantSecretPurpose, false)
	if err != nil {
		return "", fmt.Errorf("open secret %s: %w", sec.Name, err)
	}
	b := sec.Sealed
	n := aead.NonceSize()
	if len(b) < 1+n+aead.Overhead() || b[0] != sealedSecretVersion {
		return "", fmt.Errorf("open secret %s: unknown sealed format", sec.Name)
	}
	pt, err := aead.Open(nil, b[1:1+n], b[1+n:], secretAD(sec.TenantID, sec.Name))
	if err != nil {
		return "", fmt.Errorf("open secret %s: it was not sealed for this tenant and name with this daemon's secrets key (%s): set it again", sec.Name, s.secrets.Path())
	}
	return string(pt), nil
}

// SetSecret creates or rotates the tenant's secret name (api.SecretBackend).
func (s *Service) SetSecret(ctx context.Context, tenant, name, value string) (client.Secret, error) {
	if err := checkSecretName(name); err != nil {
		return client.Secret{}, err
	}
	// The errors never quote the value.
	switch {
	case len(value) > maxSecretValue:
		return client.Secret{}, fmt.Errorf("secret %s: the value is %d bytes, more than %d: %w", name, len(value), maxSecretValue, errs.ErrInvalid)
	case strings.IndexByte(value, 0) >= 0:
		return client.Secret{}, fmt.Errorf("secret %s: the value holds a NUL byte (an environment variable cannot): %w", name, errs.ErrInvalid)
	case !utf8.ValidString(value):
		return client.Secret{}, fmt.Errorf("secret %s: the value is not UTF-8 text: %w", name, errs.ErrInvalid)
	}
	sealed, err := s.sealSecret(tenant, name, value)
	if err != nil {
		return client.Secret{}, err
	}
	sec, created, err := s.st.PutSecret(ctx, store.Secret{TenantID: tenant, Name: name, Sealed: sealed, UpdatedAt: s.now()})
	if err != nil {
		return client.Secret{}, err // the store's error names the secret
	}
	s.log.Info("secret set", "tenant", tenant, "secret", name, "rotated", !created)
	users, err := s.secretUsers(ctx, tenant)
	if err != nil {
		return client.Secret{}, err
	}
	return secretView(sec, users[name]), nil
}

// ListSecrets lists the tenant's secrets with the sandboxes that reference
// each (api.SecretBackend).
func (s *Service) ListSecrets(ctx context.Context, tenant string) ([]client.Secret, error) {
	list, err := s.st.ListSecrets(ctx, tenant)
	if err != nil {
		return nil, err
	}
	users, err := s.secretUsers(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]client.Secret, 0, len(list))
	for _, sec := range list {
		out = append(out, secretView(sec, users[sec.Name]))
	}
	return out, nil
}

// DeleteSecret deletes the tenant's secret name unless a sandbox
// references it (api.SecretBackend).
func (s *Service) DeleteSecret(ctx context.Context, tenant, name string) error {
	if err := checkSecretName(name); err != nil {
		return err
	}
	if _, err := s.st.GetSecret(ctx, tenant, name); err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("secret %s: %w (stead secret ls shows the secrets)", name, errs.ErrNotFound)
		}
		return err
	}
	users, err := s.secretUsers(ctx, tenant)
	if err != nil {
		return err
	}
	if u := users[name]; len(u) > 0 {
		return fmt.Errorf("secret %s is referenced by sandbox %s: delete (--purge) them first, or set a new value instead: %w", name, strings.Join(u, ", "), errs.ErrConflict)
	}
	if err := s.st.DeleteSecret(ctx, tenant, name); err != nil {
		return err
	}
	s.log.Info("secret deleted", "tenant", tenant, "secret", name)
	return nil
}

func secretView(sec store.Secret, users []string) client.Secret {
	if users == nil {
		users = []string{}
	}
	return client.Secret{Name: sec.Name, CreatedAt: sec.CreatedAt, UpdatedAt: sec.UpdatedAt, UsedBy: users}
}

// secretUsers maps each secret name to the names of the tenant's sandboxes
// that reference it (soft-deleted ones included), sorted.
func (s *Service) secretUsers(ctx context.Context, tenant string) (map[string][]string, error) {
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant, IncludeDeleted: true})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := map[string][]string{}
	for _, sb := range list {
		sp, err := decodeRefs(sb)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, r := range sp.SecretRefs {
			if !seen[r.Name] {
				seen[r.Name] = true
				out[r.Name] = append(out[r.Name], sb.Name)
			}
		}
	}
	for _, u := range out {
		slices.Sort(u)
	}
	return out, nil
}

// SecretRefs turns a create request's secrets (NAME or NAME=VAR) and
// secret files (NAME or NAME=/run/secrets/FILE) into references, refusing
// a bad name, a variable the request's env or its service's env sets too,
// two references to one variable or one file, and a secret the tenant has
// not set (each errs.ErrInvalid, naming it).
func (s *Service) SecretRefs(ctx context.Context, tenant string, req client.CreateSandboxRequest) ([]client.SecretRef, error) {
	var refs []client.SecretRef
	vars, files := map[string]bool{}, map[string]bool{}
	for _, a := range req.Secrets {
		name, v, ok := strings.Cut(a, "=")
		if !ok {
			v = name
		}
		if err := checkSecretName(name); err != nil {
			return nil, err
		}
		if !validEnvName(v) || strings.HasPrefix(v, "STEAD_") {
			return nil, fmt.Errorf("secret %s: variable %q: use an environment variable name not starting with STEAD_: %w", name, v, errs.ErrInvalid)
		}
		inSvc := false
		if req.Service != nil {
			_, inSvc = req.Service.Env[v]
		}
		if _, ok := req.Env[v]; ok || inSvc || vars[v] {
			return nil, fmt.Errorf("secret %s: variable %s is given twice: %w", name, v, errs.ErrInvalid)
		}
		vars[v] = true
		refs = append(refs, client.SecretRef{Name: name, Env: v})
	}
	for _, a := range req.SecretFiles {
		name, f, ok := strings.Cut(a, "=")
		if !ok {
			f = SecretFileDir + "/" + name
		}
		if err := checkSecretName(name); err != nil {
			return nil, err
		}
		base, ok := strings.CutPrefix(f, SecretFileDir+"/")
		if !ok || !validFileName(base) {
			return nil, fmt.Errorf("secret %s: file %q: secret files live in %s (a tmpfs): use %s/NAME, NAME of letters, digits, '.', '_' and '-': %w", name, f, SecretFileDir, SecretFileDir, errs.ErrInvalid)
		}
		if files[base] {
			return nil, fmt.Errorf("secret %s: file %s is given twice: %w", name, f, errs.ErrInvalid)
		}
		files[base] = true
		refs = append(refs, client.SecretRef{Name: name, File: f})
	}
	if err := s.CheckSecretsSet(ctx, tenant, refs); err != nil {
		return nil, err
	}
	return refs, nil
}

// validFileName reports whether n is a plain file name of at most 128
// letters, digits, '.', '_' and '-' (not "." or "..").
func validFileName(n string) bool {
	if n == "" || n == "." || n == ".." || len(n) > 128 {
		return false
	}
	for _, c := range n {
		if !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// CheckSecretsSet answers errs.ErrInvalid naming the first secret of refs
// the tenant has not set.
func (s *Service) CheckSecretsSet(ctx context.Context, tenant string, refs []client.SecretRef) error {
	for _, r := range refs {
		if _, err := s.st.GetSecret(ctx, tenant, r.Name); errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("secret %s is not set (stead secret set %s): %w", r.Name, r.Name, errs.ErrInvalid)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// SecretValues opens the current values of the secrets refs name.
func (s *Service) SecretValues(ctx context.Context, tenant string, refs []client.SecretRef) (map[string]string, error) {
	vals := map[string]string{}
	for _, r := range refs {
		if _, ok := vals[r.Name]; ok {
			continue
		}
		sec, err := s.st.GetSecret(ctx, tenant, r.Name)
		if errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("secret %s the sandbox references is not set (stead secret set %s, then try again): %w", r.Name, r.Name, errs.ErrInvalid)
		}
		if err != nil {
			return nil, err
		}
		if vals[r.Name], err = s.openSecret(sec); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// SecretEnv returns the environment entries (VAR=value) of refs, with the
// current values.
func (s *Service) SecretEnv(ctx context.Context, tenant string, refs []client.SecretRef) ([]string, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	vals, err := s.SecretValues(ctx, tenant, refs)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, r := range refs {
		if r.Env != "" {
			env = append(env, r.Env+"="+vals[r.Name])
		}
	}
	return env, nil
}

// specRefs is the part of a stored sandbox spec the secrets read (the
// spec is internal/sandbox's; its JSON is the contract).
type specRefs struct {
	SecretRefs []client.SecretRef `json:"secret_refs,omitempty"`
}

// decodeRefs reads the secret references of a stored sandbox spec.
func decodeRefs(sb store.Sandbox) (specRefs, error) {
	var sp specRefs
	if err := json.Unmarshal(sb.Spec, &sp); err != nil {
		return sp, fmt.Errorf("decode spec of sandbox %s: %w", sb.ID, err)
	}
	return sp, nil
}

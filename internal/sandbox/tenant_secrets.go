package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
)

// Tenant secrets (stead secret set|ls|rm; sandboxes reference them with
// create --secret and --secret-file).
//
// A value is sealed with AES-256-GCM under a key derived (HKDF-SHA256,
// tenantSecretPurpose) from the daemon's secrets key file (DATA/secrets.key,
// beside the repository's master key; the same file that seals the
// environment given at create, secrets.go), with the tenant and the name as
// associated data: the store holds ciphertext only, and a row copied to
// another name or tenant does not open.
//
// A sandbox's spec holds references (client.SecretRef: a name, and the
// variable or file that gets the value), never a value, so its snapshots,
// forks and pushes carry names only. Values are opened where a sandbox
// starts (into the runtime's environment, handed to init in a sealed memory
// file, and into files on a tmpfs made for the start) and where an exec
// starts (its environment, over init's socket). Hence a rotation reaches
// every exec at once, and the service and the files at the next start.
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

// secretFileDir is where file secrets appear inside a sandbox: a tmpfs
// made for each start, read-only, never on the sandbox's disk.
const secretFileDir = "/run/secrets"

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
	aead, err := s.secrets.derive(tenantSecretPurpose, true)
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
	aead, err := s.secrets.derive(tenantSecretPurpose, false)
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
		return "", fmt.Errorf("open secret %s: it was not sealed for this tenant and name with this daemon's secrets key (%s): set it again", sec.Name, s.secrets.path)
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
		sp, err := decodeSpec(sb)
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

// secretRefs turns a create request's secrets (NAME or NAME=VAR) and
// secret files (NAME or NAME=/run/secrets/FILE) into references, refusing
// a bad name, a variable the request's env or its service's env sets too,
// two references to one variable or one file, and a secret the tenant has
// not set (each errs.ErrInvalid, naming it).
func (s *Service) secretRefs(ctx context.Context, tenant string, req client.CreateSandboxRequest) ([]client.SecretRef, error) {
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
			f = secretFileDir + "/" + name
		}
		if err := checkSecretName(name); err != nil {
			return nil, err
		}
		base, ok := strings.CutPrefix(f, secretFileDir+"/")
		if !ok || !validFileName(base) {
			return nil, fmt.Errorf("secret %s: file %q: secret files live in %s (a tmpfs): use %s/NAME, NAME of letters, digits, '.', '_' and '-': %w", name, f, secretFileDir, secretFileDir, errs.ErrInvalid)
		}
		if files[base] {
			return nil, fmt.Errorf("secret %s: file %s is given twice: %w", name, f, errs.ErrInvalid)
		}
		files[base] = true
		refs = append(refs, client.SecretRef{Name: name, File: f})
	}
	if err := s.checkSecretsSet(ctx, tenant, refs); err != nil {
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

// checkSecretsSet answers errs.ErrInvalid naming the first secret of refs
// the tenant has not set.
func (s *Service) checkSecretsSet(ctx context.Context, tenant string, refs []client.SecretRef) error {
	for _, r := range refs {
		if _, err := s.st.GetSecret(ctx, tenant, r.Name); errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("secret %s is not set (stead secret set %s): %w", r.Name, r.Name, errs.ErrInvalid)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// secretValues opens the current values of the secrets refs name.
func (s *Service) secretValues(ctx context.Context, tenant string, refs []client.SecretRef) (map[string]string, error) {
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

// secretEnv returns the environment entries (VAR=value) of refs, with the
// current values.
func (s *Service) secretEnv(ctx context.Context, tenant string, refs []client.SecretRef) ([]string, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	vals, err := s.secretValues(ctx, tenant, refs)
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

// withSecrets gives a starting sandbox its secrets: the variables join the
// base environment of every process (init gets it in a sealed memory
// file), and the files are written to a tmpfs made for this start and
// bind-mounted read-only at /run/secrets. Call release once the runtime
// has started (the sandbox keeps its own copy of the mount) or failed to.
func (s *Service) withSecrets(ctx context.Context, rs *steadrt.Spec, tenant string, sp spec) (release func(), err error) {
	release = func() {}
	if len(sp.SecretRefs) == 0 {
		return release, nil
	}
	vals, err := s.secretValues(ctx, tenant, sp.SecretRefs)
	if err != nil {
		return release, err
	}
	var files []client.SecretRef
	for _, r := range sp.SecretRefs {
		if r.Env != "" {
			rs.Env = append(rs.Env, r.Env+"="+vals[r.Name])
		}
		if r.File != "" {
			files = append(files, r)
		}
	}
	if len(files) == 0 {
		return release, nil
	}
	dir := s.secretStage(rs.ID)
	dropSecretStage(dir) // a crash's leftover
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return release, fmt.Errorf("secret files: %w", err)
	}
	// A tmpfs of its own: the values are in memory only, on the host too,
	// whatever file system the stage directory is on.
	size := 64 << 10
	for _, r := range files {
		size += len(vals[r.Name]) + 4096
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=%d", size)); err != nil {
		os.Remove(dir)
		return release, fmt.Errorf("secret files: mount a tmpfs: %w", err)
	}
	release = func() { dropSecretStage(dir) }
	for _, r := range files {
		p := filepath.Join(dir, path.Base(r.File))
		if err := writeSecretFile(p, vals[r.Name]); err != nil {
			release()
			return func() {}, fmt.Errorf("secret file %s: %w", r.File, err)
		}
	}
	rs.Mounts = append(rs.Mounts, steadrt.Mount{Source: dir, Destination: secretFileDir, ReadOnly: true})
	return release, nil
}

// writeSecretFile writes value to p (on the start's tmpfs), mode 0400,
// owned by the agent.
func writeSecretFile(p, value string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o400)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if err == nil {
		err = f.Chown(agentUID, agentUID)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// withSecretEnv returns an exec's environment env with the current values
// of the sandbox's secret variables ahead of it (env, the request's own,
// wins a name both set): a rotation reaches the next exec.
func (s *Service) withSecretEnv(ctx context.Context, sb store.Sandbox, env []string) ([]string, error) {
	sp, err := decodeSpec(sb)
	if err != nil {
		return env, err
	}
	var base []string
	if sp.Warm && len(sp.Env) > 0 {
		// From the warm pool: it booted without its environment (warm.go).
		if err := s.openEnv(sb.ID, &sp); err != nil {
			return nil, err
		}
		if base, err = envList(sp.Env); err != nil {
			return nil, err
		}
	}
	if len(sp.SecretRefs) == 0 {
		return append(base, env...), nil
	}
	senv, err := s.secretEnv(ctx, sb.TenantID, sp.SecretRefs)
	if err != nil {
		return nil, err
	}
	return append(append(base, senv...), env...), nil
}

// secretStage is the host directory where the secret files of sandbox id
// are staged during its start.
func (s *Service) secretStage(id string) string {
	return filepath.Join(s.opts.StageDir, id+"-secrets")
}

// dropSecretStage unmounts the tmpfs (every one stacked) at dir and
// removes dir; an absent dir is fine.
func dropSecretStage(dir string) {
	for range 8 {
		if unix.Unmount(dir, unix.MNT_DETACH) != nil {
			break
		}
	}
	os.Remove(dir)
}

// dropSecretStages drops the secret stages a daemon killed during a start
// left behind (their tmpfs would hold values in memory until a reboot).
func (s *Service) dropSecretStages() {
	dirs, _ := filepath.Glob(s.secretStage("*"))
	for _, d := range dirs {
		dropSecretStage(d)
		s.log.Info("dropped a secret stage left by an interrupted start", "dir", d)
	}
}

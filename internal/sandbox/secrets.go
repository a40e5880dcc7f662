package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store"
)

// Environment values given at create (the sandbox's env and its service's
// env: API keys, as often as not) never reach the database in plaintext.
// A stored spec keeps the variables' names, with empty values, and the
// values sealed in spec.Secrets: AES-256-GCM under the secrets key (a file
// in the data dir, 0600, made on first use; tenancy.SecretKey), with the sandbox id as
// associated data, so a sealed value copied onto another sandbox's row
// does not open. The values are opened only where the runtime spec is
// built (runtimeSpec), and where they move to another sandbox: a fork
// opens the snapshot's and seals them for each new sandbox; a push carries
// them opened inside its manifest, which the repository seals with the
// tenant's key, so a restore on a replacement machine gets them back and
// seals them again under that daemon's key. Views show names with masked
// values. A spec written before sealing holds plaintext values and no
// Secrets; it is read as it is and sealed by Reconcile at the next start.

// sealedEnvPrefix marks the format of spec.Secrets:
// "v1:" + base64(nonce || AES-256-GCM ciphertext of the JSON envSecrets).
const sealedEnvPrefix = "v1:"

// envSecrets is what spec.Secrets seals.
type envSecrets struct {
	Env        map[string]string `json:"env,omitempty"`
	ServiceEnv map[string]string `json:"service_env,omitempty"`
}

// envAD is the associated data binding sealed values to a sandbox.
func envAD(id string) []byte { return []byte("stead sandbox env v1\x00" + id) }

// sealEnv moves the values of sp.Env and sp.Service.Env into sp.Secrets,
// sealed for sandbox id; the maps keep the names, with empty values. A
// spec without values is left as it is (and needs no key). sp's maps and
// service are replaced, never changed in place: they may be a request's.
func (s *Service) sealEnv(id string, sp *spec) error {
	if sp.Secrets != "" {
		return fmt.Errorf("seal the environment of sandbox %s: it is sealed already", id)
	}
	v := envSecrets{Env: sp.Env}
	if sp.Service != nil {
		v.ServiceEnv = sp.Service.Env
	}
	if len(v.Env) == 0 && len(v.ServiceEnv) == 0 {
		return nil
	}
	aead, err := s.secrets.AEAD(true)
	if err != nil {
		return fmt.Errorf("seal the environment of sandbox %s: %w", id, err)
	}
	pt, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("seal the environment of sandbox %s: %w", id, err)
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, pt, envAD(id))
	clear(pt)
	sp.Secrets = sealedEnvPrefix + base64.StdEncoding.EncodeToString(sealed)
	sp.Env = envNames(sp.Env, "")
	if sp.Service != nil {
		svc := *sp.Service
		svc.Env = envNames(svc.Env, "")
		sp.Service = &svc
	}
	return nil
}

// openEnv puts the values sealed in sp.Secrets (for sandbox id) back into
// sp.Env and sp.Service.Env and clears sp.Secrets. A spec without Secrets
// (no environment, or stored before sealing) is left as it is.
func (s *Service) openEnv(id string, sp *spec) error {
	if sp.Secrets == "" {
		return nil
	}
	enc, ok := strings.CutPrefix(sp.Secrets, sealedEnvPrefix)
	if !ok {
		return fmt.Errorf("open the environment of sandbox %s: unknown sealed format", id)
	}
	sealed, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return fmt.Errorf("open the environment of sandbox %s: %w", id, err)
	}
	aead, err := s.secrets.AEAD(false)
	if err != nil {
		return fmt.Errorf("open the environment of sandbox %s: %w", id, err)
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return fmt.Errorf("open the environment of sandbox %s: sealed value too short", id)
	}
	n := aead.NonceSize()
	pt, err := aead.Open(nil, sealed[:n], sealed[n:], envAD(id))
	if err != nil {
		return fmt.Errorf("open the environment of sandbox %s: it was not sealed for this sandbox with this daemon's secrets key (%s)", id, s.secrets.Path())
	}
	var v envSecrets
	err = json.Unmarshal(pt, &v)
	clear(pt)
	if err != nil {
		return fmt.Errorf("open the environment of sandbox %s: %w", id, err)
	}
	sp.Env = v.Env
	if sp.Service != nil {
		svc := *sp.Service
		svc.Env = v.ServiceEnv
		sp.Service = &svc
	}
	sp.Secrets = ""
	return nil
}

// resealSpec returns the stored spec b, sealed for sandbox from (or not
// sealed), sealed for sandbox to instead.
func (s *Service) resealSpec(from, to string, b []byte) ([]byte, error) {
	var sp spec
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if err := s.openEnv(from, &sp); err != nil {
		return nil, err
	}
	if err := s.sealEnv(to, &sp); err != nil {
		return nil, err
	}
	return json.Marshal(sp)
}

// openSpec returns the stored spec b of sandbox id with its environment
// opened, for a push (the repository seals the manifest that carries it).
func (s *Service) openSpec(id string, b []byte) ([]byte, error) {
	var sp spec
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if sp.Secrets == "" {
		return b, nil
	}
	if err := s.openEnv(id, &sp); err != nil {
		return nil, err
	}
	// Keep the fields spec does not know (backup, archive marks).
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	delete(raw, "secrets")
	raw["env"], _ = json.Marshal(sp.Env)
	if sp.Service != nil {
		raw["service"], _ = json.Marshal(sp.Service)
	}
	return json.Marshal(raw)
}

// sealStoredEnv seals the plaintext environment of a sandbox row written
// before sealing existed, and returns the updated row.
func (s *Service) sealStoredEnv(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	sp, err := decodeSpec(sb)
	if err != nil || sp.Secrets != "" || (len(sp.Env) == 0 && (sp.Service == nil || len(sp.Service.Env) == 0)) {
		return sb, err
	}
	if err := s.sealEnv(sb.ID, &sp); err != nil {
		return sb, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(sb.Spec, &raw); err != nil {
		return sb, fmt.Errorf("decode spec of sandbox %s: %w", sb.ID, err)
	}
	raw["secrets"], _ = json.Marshal(sp.Secrets)
	raw["env"], _ = json.Marshal(sp.Env)
	if sp.Service != nil {
		raw["service"], _ = json.Marshal(sp.Service)
	}
	sb.Spec, _ = json.Marshal(raw)
	up, err := s.st.UpdateSandbox(ctx, sb)
	if err != nil {
		return sb, fmt.Errorf("seal the stored environment of sandbox %s: %w", sb.ID, err)
	}
	s.log.Info("sealed the environment stored in plaintext by an earlier stead", "sandbox", sb.ID)
	return up, nil
}

// envNames returns m's names, each with the value v.
func envNames(m map[string]string, v string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = v
	}
	return out
}

// maskedSpecJSON returns a stored or pushed spec with every environment
// value masked (for labels shown by the API).
func maskedSpecJSON(b string) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal([]byte(b), &raw) != nil {
		return ""
	}
	delete(raw, "secrets")
	var env map[string]string
	if json.Unmarshal(raw["env"], &env) == nil && env != nil {
		raw["env"], _ = json.Marshal(envNames(env, client.SecretMask))
	}
	var svc map[string]json.RawMessage
	if json.Unmarshal(raw["service"], &svc) == nil && svc != nil {
		var svcEnv map[string]string
		if json.Unmarshal(svc["env"], &svcEnv) == nil && svcEnv != nil {
			svc["env"], _ = json.Marshal(envNames(svcEnv, client.SecretMask))
			raw["service"], _ = json.Marshal(svc)
		}
	}
	out, _ := json.Marshal(raw)
	return string(out)
}

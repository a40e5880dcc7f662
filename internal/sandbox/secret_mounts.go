package sandbox

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	steadrt "github.com/stead-dev/stead/internal/runtime"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/tenancy"
)

// The node-local half of tenant secrets (internal/tenancy/tenant_secrets.go
// keeps them sealed in the shared store): opening them into a sandbox
// starting on this node, as variables and as files on a tmpfs of the
// start's own, and into each exec's environment.

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
	vals, err := s.SecretValues(ctx, tenant, sp.SecretRefs)
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
	rs.Mounts = append(rs.Mounts, steadrt.Mount{Source: dir, Destination: tenancy.SecretFileDir, ReadOnly: true})
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
	senv, err := s.SecretEnv(ctx, sb.TenantID, sp.SecretRefs)
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

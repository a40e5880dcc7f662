package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/pool"
)

// Lost copies (docs/cluster.md, section 6). A node that lost a sandbox's
// lease keeps the root it ran as the dataset sandboxes/lost-<epoch>-<id>
// (keepLostCopy): what the agent wrote after the sandbox's last push. An
// operator lists them (LostCopies), makes a new sandbox from one
// (RecoverLostCopy) and deletes one (DiscardLostCopy). A copy is data an
// agent controlled: it is only ever cloned (a btrfs snapshot, or the dir
// pool's copy, which keeps symlinks as symlinks) and deleted through the
// pool, never walked or opened by the daemon.

// lostCopyName parses the name of a kept copy, lost-<epoch>-<id>: anything
// else (a path, "..", another dataset) is errs.ErrInvalid.
func lostCopyName(name string) (epoch int64, id string, err error) {
	bad := func() (int64, string, error) {
		return 0, "", fmt.Errorf("lost copy %q: want a name like lost-<epoch>-<sandbox id> (stead node lost ls shows them): %w", name, errs.ErrInvalid)
	}
	if !pool.ValidID(name) {
		return bad()
	}
	rest, ok := strings.CutPrefix(name, lostPrefix)
	if !ok {
		return bad()
	}
	e, id, ok := strings.Cut(rest, "-")
	if !ok || id == "" || e == "" {
		return bad()
	}
	epoch, err = strconv.ParseInt(e, 10, 64)
	if err != nil || epoch < 0 || strconv.FormatInt(epoch, 10) != e {
		return bad()
	}
	return epoch, id, nil
}

// LostCopies lists the kept copies in this node's pool, by name, with
// the tenant and name of their sandbox as its record has them.
func (s *Service) LostCopies(ctx context.Context) ([]client.LostCopy, error) {
	ids, err := s.pool.List(ctx, pool.KindSandbox)
	if err != nil {
		return nil, fmt.Errorf("list lost copies: %w", err)
	}
	out := []client.LostCopy{}
	for _, name := range ids {
		epoch, id, err := lostCopyName(name)
		if err != nil {
			continue
		}
		c := client.LostCopy{Node: s.opts.Owner.Node(), Copy: name, Sandbox: id, Epoch: epoch, SizeBytes: -1}
		if sb, err := s.opts.Store.GetSandbox(ctx, "", id); err == nil && sb.ID == id {
			c.Tenant, c.SandboxName = sb.TenantID, sb.Name
		}
		ds := pool.KindSandbox + "/" + name
		if n, err := s.pool.Usage(ctx, ds); err == nil {
			c.SizeBytes = n
		}
		// The rename that kept it set its root's ctime, and nothing has
		// run in it since. (Lstat of the dataset's own directory: every
		// component of the path is the pool's.)
		var st unix.Stat_t
		if err := unix.Lstat(s.pool.Path(ds), &st); err == nil {
			c.KeptAt = time.Unix(st.Ctim.Unix()).UTC()
		}
		out = append(out, c)
	}
	return out, nil
}

// lostCopy checks that the kept copy name exists here and returns its
// dataset, epoch and sandbox id.
func (s *Service) lostCopy(ctx context.Context, name string) (ds string, epoch int64, id string, err error) {
	epoch, id, err = lostCopyName(name)
	if err != nil {
		return "", 0, "", err
	}
	ds = pool.KindSandbox + "/" + name
	ok, err := s.pool.Exists(ctx, ds)
	if err != nil {
		return "", 0, "", fmt.Errorf("lost copy %s: %w", name, err)
	}
	if !ok {
		return "", 0, "", fmt.Errorf("lost copy %s is not on this node (stead node lost ls shows the copies): %w", name, errs.ErrNotFound)
	}
	return ds, epoch, id, nil
}

// RecoverLostCopy makes a new sandbox (a new id; newName, else named by
// its id) of the copy's tenant on this node, stopped, whose root is a
// clone of the kept copy: the files its agent wrote after the last push.
// It keeps the sandbox's template, limits, environment, network policy,
// labels and failover policy, and mounts no volume (the volumes stay the
// sandbox's, on its owner). The tenant's quotas and the pool's room are
// checked as for a fork. The copy stays until it is discarded. A copy
// whose sandbox record is gone (purged) cannot be given to a tenant: it
// is errs.ErrConflict.
func (s *Service) RecoverLostCopy(ctx context.Context, name, newName string) (client.Sandbox, error) {
	unlock := s.lock("lost/" + name)
	defer unlock()
	ds, epoch, oldID, err := s.lostCopy(ctx, name)
	if err != nil {
		return client.Sandbox{}, err
	}
	sb, err := s.opts.Store.GetSandbox(ctx, "", oldID)
	if err == nil && sb.ID != oldID {
		err = errs.ErrNotFound
	}
	if errors.Is(err, errs.ErrNotFound) {
		return client.Sandbox{}, fmt.Errorf("recover lost copy %s: the record of sandbox %s is gone, so its tenant is not known (discard the copy): %w", name, oldID, errs.ErrConflict)
	}
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("recover lost copy %s: %w", name, err)
	}
	if newName != "" {
		if err := checkName("sandbox", newName); err != nil {
			return client.Sandbox{}, err
		}
	}
	sp, err := decodeSpec(sb)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("recover lost copy %s: %w", name, err)
	}
	// Opened here, sealed again for the new id by materialize.
	if err := s.openEnv(sb.ID, &sp); err != nil {
		return client.Sandbox{}, fmt.Errorf("recover lost copy %s: %w", name, err)
	}
	sp.Origin, sp.Volumes, sp.Warm = "", nil, false
	specJSON, err := json.Marshal(sp)
	if err != nil {
		return client.Sandbox{}, err
	}
	tmpl, err := s.template(ctx, sb.TenantID, sb.TemplateID)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("recover lost copy %s: %w", name, err)
	}
	id := newID()
	if newName == "" {
		newName = id
	}
	out, err := s.materialize(ctx, sb.TenantID, id, newName, tmpl, specJSON, ds, true)
	s.record(ctx, sb.TenantID, "sandbox.recover_lost_copy", name+" -> "+id, err)
	if err != nil {
		return client.Sandbox{}, fmt.Errorf("recover lost copy %s: %w", name, err)
	}
	s.log.Info("made a sandbox from a lost copy", "copy", name, "sandbox", id, "tenant", sb.TenantID, "from", oldID, "epoch", epoch)
	s.event(ctx, events.SandboxLostCopyRecovered, sb.TenantID, id, map[string]string{"copy": name, "from": oldID, "node": s.opts.Owner.Node()})
	return out, nil
}

// DiscardLostCopy deletes the kept copy name from this node's pool.
func (s *Service) DiscardLostCopy(ctx context.Context, name string) error {
	unlock := s.lock("lost/" + name)
	defer unlock()
	ds, _, oldID, err := s.lostCopy(ctx, name)
	if err != nil {
		return err
	}
	tenant := ""
	if sb, err := s.opts.Store.GetSandbox(ctx, "", oldID); err == nil && sb.ID == oldID {
		tenant = sb.TenantID
	}
	err = s.pool.Delete(ctx, ds)
	s.record(ctx, tenant, "sandbox.discard_lost_copy", name, err)
	if err != nil {
		return fmt.Errorf("discard lost copy %s: %w", name, err)
	}
	s.log.Info("discarded a lost copy", "copy", name, "sandbox", oldID)
	s.event(ctx, events.SandboxLostCopyDiscarded, tenant, oldID, map[string]string{"copy": name, "node": s.opts.Owner.Node()})
	return nil
}

// lostCopyDataset names the dataset keepLostCopy keeps sandbox id's root
// in, under the lease epoch it knew.
func lostCopyDataset(epoch int64, id string) string {
	return pool.KindSandbox + "/" + lostPrefix + strconv.FormatInt(epoch, 10) + "-" + id
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
)

// Disaster-recovery drills: restore the latest push of a sandbox into a
// fresh sandbox, verify every file against the manifest (content read back
// from disk, chunked and hashed under the tenant's key), start it, run the
// caller's verify command inside, measure the recovery time, clean up and
// record the result. Drill records are kept in the repository (records
// "drills" of the tenant's scope), so the history outlives this machine
// like the snapshots do.

// DrillEnv runs the restore part of a drill somewhere else: an empty
// daemon that knows only the repository and its key. It restores manifest
// snapshot of sandbox into a new sandbox there, verifies it, runs verify
// and removes the sandbox. Set by the daemon (it starts a second stead
// process on a fresh data directory).
type DrillEnv func(ctx context.Context, tenant string, sc *repo.Scope, m *repo.Manifest, verify []string, progress func(phase string)) (client.Drill, error)

// DrillSandbox runs a disaster-recovery drill of a sandbox's latest push.
func (s *Service) DrillSandbox(ctx context.Context, tenant, id string, req client.DrillRequest) (client.Operation, error) {
	sc, err := s.scope(ctx, tenant, false)
	if err != nil {
		return client.Operation{}, err
	}
	sbID := id
	var m *repo.Manifest
	if sb, gerr := s.get(ctx, tenant, id); gerr == nil {
		sbID = sb.ID
		m, err = s.lastPush(ctx, sc, sb)
	} else {
		m, err = sc.Latest(ctx, "sandbox/"+sbID)
	}
	if errors.Is(err, errs.ErrNotFound) {
		return client.Operation{}, fmt.Errorf("sandbox %s has no pushed snapshot to drill (stead push %s): %w", id, id, errs.ErrNotFound)
	}
	if err != nil {
		return client.Operation{}, err
	}
	if req.EmptyDataDir && s.opts.DrillEnv == nil {
		return client.Operation{}, fmt.Errorf("drills into an empty data dir need the daemon: %w", errs.ErrUnsupported)
	}
	return s.startOp(ctx, tenant, "drill", sbID, req.Wait, func(ctx context.Context, op *operation) (any, error) {
		var d client.Drill
		var err error
		start := s.now()
		if req.EmptyDataDir {
			d, err = s.opts.DrillEnv(ctx, tenant, sc, m, req.Verify, op.phase)
		} else {
			d, err = s.drillHere(ctx, op, sc, tenant, m, req.Verify)
		}
		d.ID = "drill-" + strings.TrimPrefix(newOpID(), "op-")
		d.Sandbox, d.RemoteSnapshot, d.StartedAt, d.EmptyDataDir = sbID, m.ID.String(), start, req.EmptyDataDir
		if err != nil && d.Error == "" {
			d.Error = err.Error()
		}
		d.OK = d.Error == "" && d.DigestOK && (d.VerifyExit == nil || *d.VerifyExit == 0)
		if rerr := sc.PutRecord(ctx, "drills", d.ID, d); rerr != nil {
			s.log.Error("record drill", "err", rerr)
		}
		s.record(ctx, tenant, "sandbox.drill", sbID, err)
		if !d.OK && err == nil {
			err = fmt.Errorf("drill failed: digest ok %v, verify exit %v, %s", d.DigestOK, d.VerifyExit, d.Error)
		}
		return d, err
	})
}

// drillHere restores into a new sandbox on this daemon.
func (s *Service) drillHere(ctx context.Context, op *operation, sc *repo.Scope, tenant string, m *repo.Manifest, verify []string) (client.Drill, error) {
	var d client.Drill
	t0 := time.Now()
	tag := strings.TrimPrefix(newID(), "sb-")
	name := "drill-" + tag
	// Every volume the push recorded comes back from its own push into a
	// temporary volume: the drill proves the volume pushes too, and its
	// verify command never touches the live volumes.
	var plan mountPlan
	for _, pm := range pushedMountsOf(m) {
		plan.mounts = append(plan.mounts, client.VolumeMount{SubPath: pm.SubPath, Path: pm.Path, ReadOnly: pm.ReadOnly})
		plan.restore = append(plan.restore, pm.VolumeID)
		plan.missing = append(plan.missing, pm)
	}
	n := 0
	pushes, err := s.volumePushes(ctx, tenant, m, plan.missing, func(client.PushedMount) string {
		n++
		return fmt.Sprintf("drill-%s-%d", tag, n)
	})
	if err != nil {
		return d, err
	}
	sb, vols, rs, err := s.restoreSandbox(ctx, op, sc, tenant, m, name, true, plan, pushes)
	if err != nil {
		return d, err
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		s.DeleteSandbox(ctx, tenant, sb.ID, true)
		for _, v := range vols {
			s.DeleteVolume(ctx, tenant, v.ID, true)
		}
	}()
	d.RestoreSeconds = time.Since(t0).Seconds()
	d.Bytes, d.Files = rs.BytesWritten, rs.Files
	op.phase("verify")
	t1 := time.Now()
	v, err := sc.Verify(ctx, m.ID, s.pool.Path(datasetName(sb.ID)))
	if err != nil {
		return d, err
	}
	d.DigestOK = v.OK()
	if !v.OK() {
		d.Error = "restored tree differs from the snapshot: " + strings.Join(v.Diffs[:min(5, len(v.Diffs))], "; ")
	}
	op.phase("start")
	if _, err := s.StartSandbox(ctx, tenant, sb.ID); err != nil {
		return d, err
	}
	if len(verify) > 0 {
		op.phase("verify-command")
		res, err := s.Exec(ctx, tenant, sb.ID, client.ExecRequest{Command: verify, Timeout: "10m"}, nil)
		if err != nil {
			return d, fmt.Errorf("verify command: %w", err)
		}
		code := res.ExitCode
		d.VerifyExit = &code
		d.VerifyOutput = tail(string(res.Stdout)+string(res.Stderr), 2000)
	}
	d.VerifySeconds = time.Since(t1).Seconds()
	d.RecoverySeconds = time.Since(t0).Seconds()
	return d, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// ListDrills lists recorded drills (of one sandbox when set), newest first.
func (s *Service) ListDrills(ctx context.Context, tenant, sandbox string) ([]client.Drill, error) {
	sc, err := s.scope(ctx, tenant, false)
	if errors.Is(err, errs.ErrNotFound) {
		return []client.Drill{}, nil
	}
	if err != nil {
		return nil, err
	}
	sbID := sandbox
	if sb, err := s.get(ctx, tenant, sandbox); sandbox != "" && err == nil {
		sbID = sb.ID
	}
	out := []client.Drill{}
	err = sc.Records(ctx, "drills", func(id string, decode func(any) error) error {
		var d client.Drill
		if err := decode(&d); err != nil {
			return fmt.Errorf("drill record %s: %w", id, err)
		}
		if sbID == "" || d.Sandbox == sbID {
			out = append(out, d)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b client.Drill) int { return b.StartedAt.Compare(a.StartedAt) })
	return out, err
}

// SetDrillEnv sets where drills into an empty data dir run (the daemon
// passes a function starting a second daemon).
func (s *Service) SetDrillEnv(env DrillEnv) { s.opts.DrillEnv = env }

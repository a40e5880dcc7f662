package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/repo"
)

// Operations: long work (push, restore, drill ...) runs in the background
// and is followed through an Operation record kept in memory. A record
// lives until the daemon exits or an hour after it ended. In a cluster the
// record is on the node that runs the operation, and its id names that
// node (opID), so that a request reaching any other node is forwarded
// there.

const opRetention = time.Hour

// operation is the live state of one operation.
type operation struct {
	mu     sync.Mutex
	tenant string
	// sandbox is the id of the sandbox the operation acts on ("" for none):
	// that sandbox's agent token may follow it (see opSandbox).
	sandbox string
	v       client.Operation
	changed chan struct{} // closed and replaced on every change
}

// opSandbox returns the sandbox an operation of kind with target acts on:
// the target of the kinds whose target is a sandbox id, "" for the others
// (restores and pulls target a pushed snapshot, volume operations a volume
// or its snapshot, check, repair and prune the repository). A new kind is followed
// by no agent token until it is listed here.
func opSandbox(kind, target string) string {
	switch kind {
	case "push", "archive", "hydrate", "drill", "restore-path":
		return target
	}
	return ""
}

// ops is the registry of operations.
type ops struct {
	mu sync.Mutex
	m  map[string]*operation
}

func newOpID() string {
	var b [8]byte
	rand.Read(b[:])
	return "op-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// opID is the id of a new operation of this node: "op-<random>" on a
// single node; in a cluster "op-<node tag>-<random>" (api.OperationID), so
// that any node forwards a request for it to this one, where it runs and
// where its record is kept.
func (s *Service) opID() string {
	id := newOpID()
	if !s.clustered() {
		return id
	}
	return api.OperationID(s.opts.Owner.Node(), strings.TrimPrefix(id, "op-"))
}

func (o *operation) snapshot() client.Operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.v
	if v.Progress != nil {
		p := *v.Progress
		v.Progress = &p
	}
	return v
}

func (o *operation) update(fn func(*client.Operation)) {
	o.mu.Lock()
	fn(&o.v)
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
}

// progress records engine progress under a phase name.
func (o *operation) progress(phase string) func(repo.Progress) {
	return func(p repo.Progress) {
		o.update(func(v *client.Operation) {
			v.Progress = &client.Progress{Phase: phase, FilesDone: p.FilesDone, FilesTotal: p.FilesTotal,
				BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, BytesMoved: p.BytesMoved, Elapsed: p.Elapsed.Seconds()}
		})
	}
}

// phase records a phase without numbers.
func (o *operation) phase(name string) {
	o.update(func(v *client.Operation) {
		v.Progress = &client.Progress{Phase: name, Elapsed: time.Since(v.StartedAt).Seconds()}
	})
}

// startOp runs fn in the background as an operation of tenant and returns
// it (waiting for the end when wait is set). fn's result is marshalled into
// the operation's Result. The work is detached from the request's context.
func (s *Service) startOp(ctx context.Context, tenant, kind, target string, wait bool, fn func(ctx context.Context, op *operation) (any, error)) (client.Operation, error) {
	op := &operation{tenant: tenant, sandbox: opSandbox(kind, target), changed: make(chan struct{}),
		v: client.Operation{ID: s.opID(), Kind: kind, Target: target, State: "running", StartedAt: s.now()}}
	s.ops.mu.Lock()
	if s.ops.m == nil {
		s.ops.m = map[string]*operation{}
	}
	for id, o := range s.ops.m { // drop old finished ones
		if v := o.snapshot(); v.EndedAt != nil && time.Since(*v.EndedAt) > opRetention {
			delete(s.ops.m, id)
		}
	}
	s.ops.m[op.v.ID] = op
	s.ops.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := fn(context.WithoutCancel(ctx), op)
		var raw json.RawMessage
		if res != nil {
			raw, _ = json.Marshal(res)
		}
		op.update(func(v *client.Operation) {
			now := s.now()
			v.EndedAt = &now
			v.Result = raw
			if err != nil {
				v.State, v.Error = "failed", errs.Message(err)
			} else {
				v.State = "succeeded"
			}
		})
		s.event(ctx, OperationFinished, tenant, op.sandbox, opEventData(op.snapshot()))
		if err != nil {
			s.log.Warn("operation failed", "op", op.v.ID, "kind", kind, "target", target, "err", err)
		} else {
			s.log.Info("operation done", "op", op.v.ID, "kind", kind, "target", target)
		}
		s.opEvent(ctx, op, res, err)
	}()
	if wait {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return op.snapshot(), nil
}

// op returns operation id if p may see it: an operation of p's tenant and,
// for a sandbox-scoped principal, one acting on p's sandbox. Any other id
// is the same errs.ErrNotFound as one that never existed.
func (s *Service) op(p api.Principal, id string) (*operation, error) {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	o, ok := s.ops.m[id]
	if !ok || p.TenantID == "" || o.tenant != p.TenantID || (p.Sandbox != "" && o.sandbox != p.Sandbox) {
		return nil, fmt.Errorf("operation %s: %w", id, errs.ErrNotFound)
	}
	return o, nil
}

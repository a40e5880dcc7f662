package state

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/names"
	"github.com/stead-dev/stead/internal/store"
)

// MaxDocumentBytes is the largest checkpoint document (and JSON Schema) a
// put accepts.
const MaxDocumentBytes = 1 << 20

// maxRunBytes caps a run id.
const maxRunBytes = 256

var (
	_ api.CheckpointBackend      = (*Service)(nil)
	_ api.ScopedCheckpointReader = (*Service)(nil)
)

// Service implements api.CheckpointBackend on a store.Store. It is safe for
// concurrent use.
type Service struct {
	st      store.Store
	schemas *schemaCache
	admit   api.StateAdmitFunc
}

// SetStateAdmit makes every write that adds a version ask f first (the
// tenant's state quota); call it before serving.
func (s *Service) SetStateAdmit(f api.StateAdmitFunc) { s.admit = f }

// New returns a Service that keeps its documents in st.
func New(st store.Store) *Service {
	return &Service{st: st, schemas: newSchemaCache()}
}

// PutCheckpoint writes the document's next version; see
// api.CheckpointBackend.
func (s *Service) PutCheckpoint(ctx context.Context, p api.Principal, sandbox string, w api.CheckpointWrite) (client.Checkpoint, error) {
	ref := docRef(sandbox, w.Agent, w.Name)
	if err := validateRef(w.Agent, w.Name); err != nil {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	if err := validateRun(w.Run); err != nil {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	ifVersion := store.AnyVersion
	if w.IfVersion != nil {
		if *w.IfVersion < 0 {
			return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: if-version %d: %w", ref, *w.IfVersion, errs.ErrInvalid)
		}
		ifVersion = *w.IfVersion
	}
	if w.Keep < 0 || w.Keep > store.MaxCheckpointKeep {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: keep %d is not between 1 and %d: %w",
			ref, w.Keep, store.MaxCheckpointKeep, errs.ErrInvalid)
	}
	doc, err := parseDocument(w.Body)
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	if err := s.admit.Admit(ctx, p.TenantID, int64(len(w.Body))); err != nil {
		return client.Checkpoint{}, fmt.Errorf("put checkpoint %s: %w", ref, err)
	}
	c, err := s.st.PutCheckpoint(ctx, store.CheckpointWrite{
		CheckpointKey: key(p.TenantID, sbID, w.Agent, w.Name),
		IfVersion:     ifVersion,
		Body:          w.Body,
		Principal:     p.KeyID,
		PrincipalKind: principalKind(p),
		RunID:         w.Run,
		Keep:          w.Keep,
		Check:         s.checkAgainst(doc),
		Guard: func(d store.CheckpointDoc, latest func() ([]byte, error)) error {
			if err := mayWrite(p, d); err != nil {
				return err
			}
			if w.Keep > 0 && w.Keep != d.Keep {
				if err := mayGovern(p, d); err != nil {
					return fmt.Errorf("keep %d: %w", w.Keep, err)
				}
			}
			return checkMutability(d, latest, w.Body, false)
		},
	})
	if err != nil {
		return client.Checkpoint{}, err // the store's error names the operation and document
	}
	return view(c, false), nil
}

// GetCheckpoint returns version (0: the latest) with its body. It is the
// trusted, unscoped read for the daemon's own use; API callers read through
// ReadCheckpoint, which applies the document's read scope.
func (s *Service) GetCheckpoint(ctx context.Context, tenant, sandbox, agent, name string, version int64) (client.Checkpoint, error) {
	ref := docRef(sandbox, agent, name)
	if err := validateRef(agent, name); err != nil {
		return client.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", ref, err)
	}
	if version < 0 {
		return client.Checkpoint{}, fmt.Errorf("get checkpoint %s: version %d: %w", ref, version, errs.ErrInvalid)
	}
	sbID, err := s.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", ref, err)
	}
	c, err := s.st.GetCheckpoint(ctx, key(tenant, sbID, agent, name), version)
	if err != nil {
		return client.Checkpoint{}, err
	}
	return view(c, true), nil
}

// ListCheckpoints describes every document of the sandbox, all agents,
// ordered by agent, then name.
func (s *Service) ListCheckpoints(ctx context.Context, tenant, sandbox string) ([]client.CheckpointInfo, error) {
	sbID, err := s.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of sandbox %s: %w", sandbox, err)
	}
	docs, err := s.st.ListCheckpoints(ctx, tenant, sbID)
	if err != nil {
		return nil, err
	}
	out := make([]client.CheckpointInfo, 0, len(docs))
	for _, d := range docs {
		out = append(out, viewDoc(d))
	}
	return out, nil
}

// CheckpointVersions lists the kept versions, oldest first, without
// bodies. Like GetCheckpoint it is unscoped; API callers use
// ReadCheckpointVersions.
func (s *Service) CheckpointVersions(ctx context.Context, tenant, sandbox, agent, name string) ([]client.Checkpoint, error) {
	ref := docRef(sandbox, agent, name)
	if err := validateRef(agent, name); err != nil {
		return nil, fmt.Errorf("list versions of checkpoint %s: %w", ref, err)
	}
	sbID, err := s.sandbox(ctx, tenant, sandbox, false)
	if err != nil {
		return nil, fmt.Errorf("list versions of checkpoint %s: %w", ref, err)
	}
	vs, err := s.st.ListCheckpointVersions(ctx, key(tenant, sbID, agent, name))
	if err != nil {
		return nil, err
	}
	out := make([]client.Checkpoint, 0, len(vs))
	for _, c := range vs {
		out = append(out, view(c, false))
	}
	return out, nil
}

// RollbackCheckpoint writes version req.Version's body as a new version,
// noted "rollback from N". The body must pass the document's current
// schema; req.IfVersion works as on a put.
func (s *Service) RollbackCheckpoint(ctx context.Context, p api.Principal, sandbox, agent, name string, req client.RollbackCheckpointRequest) (client.Checkpoint, error) {
	ref := docRef(sandbox, agent, name)
	if err := validateRef(agent, name); err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: %w", ref, err)
	}
	if err := validateRun(req.Run); err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: %w", ref, err)
	}
	if req.Version < 1 {
		return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: version %d: versions start at 1: %w", ref, req.Version, errs.ErrInvalid)
	}
	ifVersion := store.AnyVersion
	if req.IfVersion != nil {
		if *req.IfVersion < 0 {
			return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: if-version %d: %w", ref, *req.IfVersion, errs.ErrInvalid)
		}
		ifVersion = *req.IfVersion
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: %w", ref, err)
	}
	k := key(p.TenantID, sbID, agent, name)
	src, err := s.st.GetCheckpoint(ctx, k, req.Version)
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback to version %d (is it still kept? list the versions): %w", req.Version, err)
	}
	doc, err := parseDocument(src.Body)
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: stored version %d: %w", ref, req.Version, err)
	}
	if err := s.admit.Admit(ctx, p.TenantID, int64(len(src.Body))); err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback checkpoint %s: %w", ref, err)
	}
	c, err := s.st.PutCheckpoint(ctx, store.CheckpointWrite{
		CheckpointKey: k,
		IfVersion:     ifVersion,
		Body:          src.Body,
		Principal:     p.KeyID,
		PrincipalKind: principalKind(p),
		RunID:         req.Run,
		Note:          fmt.Sprintf("rollback from %d", req.Version),
		Check:         s.checkAgainst(doc),
		Guard: func(d store.CheckpointDoc, latest func() ([]byte, error)) error {
			if err := mayWrite(p, d); err != nil {
				return err
			}
			return checkMutability(d, latest, src.Body, true)
		},
	})
	if err != nil {
		return client.Checkpoint{}, fmt.Errorf("rollback to version %d: %w", req.Version, err)
	}
	return view(c, false), nil
}

// SetCheckpointSchema sets the document's JSON Schema, or removes it when
// schema is empty or JSON null. A schema that is not JSON or does not
// compile is errs.ErrInvalid. The document's current versions are not
// re-checked: the schema applies to writes from now on.
func (s *Service) SetCheckpointSchema(ctx context.Context, p api.Principal, sandbox, agent, name string, schema []byte) (client.CheckpointInfo, error) {
	ref := docRef(sandbox, agent, name)
	if err := validateRef(agent, name); err != nil {
		return client.CheckpointInfo{}, fmt.Errorf("set schema of checkpoint %s: %w", ref, err)
	}
	if isNull(schema) {
		schema = nil
	} else {
		if _, err := parseDocument(schema); err != nil {
			return client.CheckpointInfo{}, fmt.Errorf("set schema of checkpoint %s: schema: %w", ref, err)
		}
		if _, err := s.schemas.get(schema); err != nil {
			return client.CheckpointInfo{}, fmt.Errorf("set schema of checkpoint %s: %w", ref, err)
		}
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.CheckpointInfo{}, fmt.Errorf("set schema of checkpoint %s: %w", ref, err)
	}
	d, err := s.st.SetCheckpointSchema(ctx, key(p.TenantID, sbID, agent, name), schema, func(d store.CheckpointDoc) error {
		return mayWrite(p, d)
	})
	if err != nil {
		return client.CheckpointInfo{}, err
	}
	return viewDoc(d), nil
}

// DeleteCheckpoint removes the document with every version and its schema.
func (s *Service) DeleteCheckpoint(ctx context.Context, p api.Principal, sandbox, agent, name string) error {
	ref := docRef(sandbox, agent, name)
	if err := validateRef(agent, name); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", ref, err)
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", ref, err)
	}
	return s.st.DeleteCheckpoint(ctx, key(p.TenantID, sbID, agent, name), func(d store.CheckpointDoc) error {
		return mayDelete(p, d)
	})
}

// sandbox resolves an id or name within the tenant to the sandbox's id. A
// write to a soft-deleted sandbox is errs.ErrConflict.
func (s *Service) sandbox(ctx context.Context, tenant, idOrName string, write bool) (string, error) {
	return store.AgentStateSandbox(ctx, s.st, tenant, idOrName, write, "checkpoints")
}

// checkAgainst returns the store's in-transaction check of doc (the parsed
// body) against the document's stored schema.
func (s *Service) checkAgainst(doc any) func(schema []byte) error {
	return func(schema []byte) error {
		if len(schema) == 0 {
			return nil
		}
		sch, err := s.schemas.get(schema)
		if err != nil {
			return fmt.Errorf("stored schema: %w", err)
		}
		return validate(sch, doc)
	}
}

func key(tenant, sandboxID, agent, name string) store.CheckpointKey {
	return store.CheckpointKey{TenantID: tenant, SandboxID: sandboxID, Agent: agent, Name: name}
}

// docRef names a document in messages: sandbox/name or sandbox/agent/name.
func docRef(sandbox, agent, name string) string {
	if agent == "" {
		return sandbox + "/" + name
	}
	return sandbox + "/" + agent + "/" + name
}

func validateRef(agent, name string) error {
	if !names.Valid(name) {
		return fmt.Errorf("document name %q: use 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-': %w", name, errs.ErrInvalid)
	}
	if agent != "" && !names.Valid(agent) {
		return fmt.Errorf("agent name %q: use 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-': %w", agent, errs.ErrInvalid)
	}
	return nil
}

func validateRun(run string) error {
	if len(run) > maxRunBytes {
		return fmt.Errorf("run id is %d bytes, at most %d: %w", len(run), maxRunBytes, errs.ErrInvalid)
	}
	for _, r := range run {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("run id %q: control characters are not allowed: %w", run, errs.ErrInvalid)
		}
	}
	return nil
}

// isNull reports whether b is empty or the JSON literal null.
func isNull(b []byte) bool {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return len(b) == 0 || string(b) == "null"
}

// view turns a stored version into its API form.
func view(c store.Checkpoint, withBody bool) client.Checkpoint {
	v := client.Checkpoint{
		Name: c.Name, Agent: c.Agent, Version: c.Version, CreatedAt: c.CreatedAt,
		Principal: c.Principal, PrincipalKind: c.PrincipalKind, Run: c.RunID, Note: c.Note,
	}
	if withBody {
		v.Body = json.RawMessage(c.Body)
	}
	return v
}

// viewDoc turns a stored document description into its API form.
func viewDoc(d store.CheckpointDoc) client.CheckpointInfo {
	return client.CheckpointInfo{
		Name: d.Name, Agent: d.Agent, Version: d.Latest, Oldest: d.Oldest, Versions: d.Versions,
		Keep: d.Keep, Schema: json.RawMessage(d.Schema), Policy: viewPolicy(d.Policy), CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
}

package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/names"
	"github.com/stead-dev/stead/internal/store"
)

// Governance of checkpoint documents. Every document has a policy (see
// client.CheckpointPolicy) that the service enforces inside each write
// transaction, against the policy stored at that moment:
//
//   - Authority (policy.write) decides who may put, roll back, set the
//     schema of and delete the document.
//   - Scope (policy.read) decides who may read its versions (bodies and
//     provenance). The document list shows every document's settings,
//     policy included, so a caller can see what it may not read and why.
//   - Mutability: append-only documents take only versions that extend the
//     previous one; immutable documents take version 1 only (no
//     rollback). Deleting a document that is not mutable takes an admin key.
//   - Provenance: every version records the writer's key id, its kind
//     (api-key, admin, sandbox-agent), the run and a note.
//   - Recoverability: the history depth, keep (1: no history).
//
// A document with the default policy (any principal of the tenant writes
// and reads; mutable) behaves as before governance existed, and any
// principal that may write it may set its policy or keep. Once governed
// (any other policy), only an admin key may change its policy, or its keep
// through a put. A forbidden call is errs.ErrForbidden and a mutability
// violation errs.ErrConflict; both change nothing.

// maxPolicyKeys caps the key ids of one access list.
const maxPolicyKeys = 100

// SetCheckpointPolicy replaces the document's policy; see
// api.CheckpointBackend and the governance rules above.
func (s *Service) SetCheckpointPolicy(ctx context.Context, p api.Principal, sandbox, agent, name string, req client.SetCheckpointPolicyRequest) (client.CheckpointInfo, error) {
	ref := docRef(sandbox, agent, name)
	if err := validateRef(agent, name); err != nil {
		return client.CheckpointInfo{}, fmt.Errorf("set policy of checkpoint %s: %w", ref, err)
	}
	pol, err := parsePolicy(req)
	if err != nil {
		return client.CheckpointInfo{}, fmt.Errorf("set policy of checkpoint %s: %w", ref, err)
	}
	if req.Keep < 0 || req.Keep > store.MaxCheckpointKeep {
		return client.CheckpointInfo{}, fmt.Errorf("set policy of checkpoint %s: keep %d is not between 1 and %d: %w",
			ref, req.Keep, store.MaxCheckpointKeep, errs.ErrInvalid)
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, true)
	if err != nil {
		return client.CheckpointInfo{}, fmt.Errorf("set policy of checkpoint %s: %w", ref, err)
	}
	d, err := s.st.SetCheckpointPolicy(ctx, key(p.TenantID, sbID, agent, name), pol, req.Keep, func(d store.CheckpointDoc) error {
		return mayGovern(p, d)
	})
	if err != nil {
		return client.CheckpointInfo{}, err
	}
	return viewDoc(d), nil
}

// ReadCheckpoint is GetCheckpoint for principal p: the document's read
// scope must admit p (errs.ErrForbidden otherwise).
func (s *Service) ReadCheckpoint(ctx context.Context, p api.Principal, sandbox, agent, name string, version int64) (client.Checkpoint, error) {
	if err := s.mayRead(ctx, p, sandbox, agent, name); err != nil {
		return client.Checkpoint{}, fmt.Errorf("get checkpoint %s: %w", docRef(sandbox, agent, name), err)
	}
	return s.GetCheckpoint(ctx, p.TenantID, sandbox, agent, name, version)
}

// ReadCheckpointVersions is CheckpointVersions for principal p: the
// document's read scope must admit p (errs.ErrForbidden otherwise).
func (s *Service) ReadCheckpointVersions(ctx context.Context, p api.Principal, sandbox, agent, name string) ([]client.Checkpoint, error) {
	if err := s.mayRead(ctx, p, sandbox, agent, name); err != nil {
		return nil, fmt.Errorf("list versions of checkpoint %s: %w", docRef(sandbox, agent, name), err)
	}
	return s.CheckpointVersions(ctx, p.TenantID, sandbox, agent, name)
}

// mayRead checks the document's read scope for p. An absent document is
// left to the read that follows (errs.ErrNotFound).
func (s *Service) mayRead(ctx context.Context, p api.Principal, sandbox, agent, name string) error {
	if err := validateRef(agent, name); err != nil {
		return err
	}
	sbID, err := s.sandbox(ctx, p.TenantID, sandbox, false)
	if err != nil {
		return err
	}
	d, err := s.st.GetCheckpointDoc(ctx, key(p.TenantID, sbID, agent, name))
	if errors.Is(err, errs.ErrNotFound) {
		return nil // absent: the read reports it
	}
	if err != nil {
		return err
	}
	if !admits(d.Policy.Read, p, d.SandboxID) {
		return fmt.Errorf("reading this document is limited to %s, and this caller is %s: %w",
			describeAccess(d.Policy.Read), describePrincipal(p), errs.ErrForbidden)
	}
	return nil
}

// mayWrite checks the document's authority for p.
func mayWrite(p api.Principal, d store.CheckpointDoc) error {
	if !admits(d.Policy.Write, p, d.SandboxID) {
		return fmt.Errorf("writing this document is limited to %s, and this caller is %s: %w",
			describeAccess(d.Policy.Write), describePrincipal(p), errs.ErrForbidden)
	}
	return nil
}

// mayGovern checks that p may change the document's policy or keep: an
// admin key always; anyone who may write it while its policy is the
// default.
func mayGovern(p api.Principal, d store.CheckpointDoc) error {
	if isAdmin(p) {
		return nil
	}
	if !isDefaultPolicy(d.Policy) {
		return fmt.Errorf("the document is governed (write: %s, read: %s, %s); only an admin key may change its policy or history depth: %w",
			describeAccess(d.Policy.Write), describeAccess(d.Policy.Read), d.Policy.Mutability, errs.ErrForbidden)
	}
	return mayWrite(p, d)
}

// mayDelete checks that p may delete the document: write authority, and an
// admin key unless the document is mutable.
func mayDelete(p api.Principal, d store.CheckpointDoc) error {
	if err := mayWrite(p, d); err != nil {
		return err
	}
	if d.Policy.Mutability != store.Mutable && !isAdmin(p) {
		return fmt.Errorf("the document is %s; only an admin key may delete it: %w", d.Policy.Mutability, errs.ErrForbidden)
	}
	return nil
}

// checkMutability checks that body may follow the document's latest
// version under its mutability; a violation is errs.ErrConflict.
func checkMutability(d store.CheckpointDoc, latest func() ([]byte, error), body []byte, rollback bool) error {
	switch d.Policy.Mutability {
	case store.Immutable:
		if rollback {
			return fmt.Errorf("the document is immutable: rollback is refused: %w", errs.ErrConflict)
		}
		if d.Latest > 0 {
			return fmt.Errorf("the document is immutable: only version 1 may be written, and it has version %d: %w", d.Latest, errs.ErrConflict)
		}
	case store.AppendOnly:
		prev, err := latest()
		if err != nil {
			return err
		}
		if err := extends(prev, body); err != nil {
			return fmt.Errorf("the document is append-only: %w: %w", err, errs.ErrConflict)
		}
	}
	return nil
}

// extends reports (as an error saying why not) whether next extends prev
// as append-only requires: next is a JSON array that starts with every
// element of prev, or a JSON object that keeps every key of prev with its
// value. With no previous version (prev nil), next must be an array or an
// object.
func extends(prev, next []byte) error {
	nv, err := decodeNumbers(next)
	if err != nil {
		return fmt.Errorf("new version: %w", err)
	}
	if prev == nil {
		switch nv.(type) {
		case []any, map[string]any:
			return nil
		}
		return fmt.Errorf("a version must be a JSON object or array, not %s", jsonKind(nv))
	}
	pv, err := decodeNumbers(prev)
	if err != nil {
		return fmt.Errorf("previous version: %w", err)
	}
	switch p := pv.(type) {
	case []any:
		n, ok := nv.([]any)
		if !ok {
			return fmt.Errorf("the previous version is an array; the new one must be an array that starts with it, not %s", jsonKind(nv))
		}
		if len(n) < len(p) {
			return fmt.Errorf("the new array has %d elements, fewer than the previous %d", len(n), len(p))
		}
		for i := range p {
			if !reflect.DeepEqual(p[i], n[i]) {
				return fmt.Errorf("element %d differs from the previous version's; only appending is allowed", i)
			}
		}
		return nil
	case map[string]any:
		n, ok := nv.(map[string]any)
		if !ok {
			return fmt.Errorf("the previous version is an object; the new one must be an object that keeps its keys, not %s", jsonKind(nv))
		}
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, ok := n[k]
			if !ok {
				return fmt.Errorf("key %q of the previous version is missing; keys may only be added", k)
			}
			if !reflect.DeepEqual(p[k], v) {
				return fmt.Errorf("key %q changed its value; keys may only be added", k)
			}
		}
		return nil
	default:
		return fmt.Errorf("the latest version is %s, which cannot be extended; only a JSON object or array can", jsonKind(pv))
	}
}

// decodeNumbers parses a JSON value keeping numbers as written, so
// comparing two values never loses precision.
func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// parsePolicy validates a policy request and turns it into the store's
// form (normalized).
func parsePolicy(req client.SetCheckpointPolicyRequest) (store.CheckpointPolicy, error) {
	w, err := parseAccess("write", req.Write)
	if err != nil {
		return store.CheckpointPolicy{}, err
	}
	r, err := parseAccess("read", req.Read)
	if err != nil {
		return store.CheckpointPolicy{}, err
	}
	switch req.Mutability {
	case "", store.Mutable, store.AppendOnly, store.Immutable:
	default:
		return store.CheckpointPolicy{}, fmt.Errorf("mutability %q: want mutable, append-only or immutable: %w", req.Mutability, errs.ErrInvalid)
	}
	return store.CheckpointPolicy{Write: w, Read: r, Mutability: req.Mutability}.Normalized(), nil
}

func parseAccess(what string, a client.CheckpointAccess) (store.CheckpointAccess, error) {
	switch a.Who {
	case "", store.AccessAny, store.AccessAdmin, store.AccessAgent:
		if len(a.Keys) > 0 {
			return store.CheckpointAccess{}, fmt.Errorf("%s: keys are only allowed with who=keys: %w", what, errs.ErrInvalid)
		}
		return store.CheckpointAccess{Who: a.Who}, nil
	case store.AccessKeys:
	default:
		return store.CheckpointAccess{}, fmt.Errorf("%s: who %q: want any, admin, agent or keys: %w", what, a.Who, errs.ErrInvalid)
	}
	if len(a.Keys) == 0 || len(a.Keys) > maxPolicyKeys {
		return store.CheckpointAccess{}, fmt.Errorf("%s: who=keys needs 1 to %d key ids, got %d: %w", what, maxPolicyKeys, len(a.Keys), errs.ErrInvalid)
	}
	keys := make([]string, 0, len(a.Keys))
	for _, k := range a.Keys {
		if k == "" || len(k) > 128 || strings.ContainsAny(k, ", \t\r\n") || !names.Valid(k) {
			return store.CheckpointAccess{}, fmt.Errorf("%s: key id %q: use the id of an API key (stead key list): %w", what, k, errs.ErrInvalid)
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return store.CheckpointAccess{Who: store.AccessKeys, Keys: keys}, nil
}

// admits reports whether access a lets principal p at the document of
// sandbox sandboxID.
func admits(a store.CheckpointAccess, p api.Principal, sandboxID string) bool {
	switch a.Who {
	case "", store.AccessAny:
		return true
	case store.AccessAdmin:
		return isAdmin(p)
	case store.AccessAgent:
		return p.Sandbox != "" && p.Sandbox == sandboxID
	case store.AccessKeys:
		return p.Sandbox == "" && slices.Contains(a.Keys, p.KeyID)
	}
	return false // an access this version does not know admits no one
}

// isAdmin reports whether p is an admin API key (never the agent token).
func isAdmin(p api.Principal) bool { return p.AdministersTenant() }

// principalKind is the kind recorded as provenance.
func principalKind(p api.Principal) string {
	switch {
	case p.Sandbox != "":
		return store.PrincipalAgent
	case p.AdministersTenant():
		return store.PrincipalAdmin
	}
	return store.PrincipalAPIKey
}

func isDefaultPolicy(p store.CheckpointPolicy) bool {
	p = p.Normalized()
	return p.Write.Who == store.AccessAny && p.Read.Who == store.AccessAny && p.Mutability == store.Mutable
}

func describeAccess(a store.CheckpointAccess) string {
	switch a.Who {
	case "", store.AccessAny:
		return "any principal of the tenant"
	case store.AccessAdmin:
		return "admin keys"
	case store.AccessAgent:
		return "the sandbox's own agent token"
	case store.AccessKeys:
		return "the API keys " + strings.Join(a.Keys, ", ")
	}
	return fmt.Sprintf("%q (unknown)", a.Who)
}

func describePrincipal(p api.Principal) string {
	switch principalKind(p) {
	case store.PrincipalAgent:
		return "the agent token of sandbox " + p.Sandbox
	case store.PrincipalAdmin:
		return "admin key " + p.KeyID
	}
	return "API key " + p.KeyID
}

// viewPolicy turns a stored policy into its API form.
func viewPolicy(p store.CheckpointPolicy) client.CheckpointPolicy {
	p = p.Normalized()
	return client.CheckpointPolicy{
		Write:      client.CheckpointAccess{Who: p.Write.Who, Keys: p.Write.Keys},
		Read:       client.CheckpointAccess{Who: p.Read.Who, Keys: p.Read.Keys},
		Mutability: p.Mutability,
	}
}

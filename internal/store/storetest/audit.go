package storetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// auditEntry returns entry seq of a test chain: its hash is a stand-in
// (the store must not interpret it) derived from prev and seq.
func auditEntry(seq int64, prev []byte, tenant string, tm time.Time) store.AuditEntry {
	h := sha256.Sum256(fmt.Appendf(nil, "%x/%d", prev, seq))
	return store.AuditEntry{
		Seq: seq, Time: tm, Actor: "key-1", Tenant: tenant,
		Action: "POST /v1/sandboxes/{id}/stop", Target: fmt.Sprintf("sb-%d", seq), Outcome: "200",
		PrevHash: prev, Hash: h[:],
	}
}

// appendChain appends entries 1..n (times at(1)..at(n)); every third is of
// tenant "acme", the rest of the default tenant.
func appendChain(t *testing.T, s store.Store, n int) []store.AuditEntry {
	t.Helper()
	var out []store.AuditEntry
	prev := make([]byte, 32)
	for i := 1; i <= n; i++ {
		tenant := store.DefaultTenant
		if i%3 == 0 {
			tenant = "acme"
		}
		e := auditEntry(int64(i), prev, tenant, at(i))
		noErr(t, s.AppendAudit(t.Context(), e), fmt.Sprintf("append %d", i))
		out = append(out, e)
		prev = e.Hash
	}
	return out
}

func checkAuditEntries(t *testing.T, what string, got, want []store.AuditEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		checkTime(t, fmt.Sprintf("%s: entry %d time", what, w.Seq), g.Time, w.Time)
		g.Time, w.Time = time.Time{}, time.Time{}
		if g.Seq != w.Seq || g.Actor != w.Actor || g.Tenant != w.Tenant || g.Action != w.Action ||
			g.Target != w.Target || g.Outcome != w.Outcome || !bytes.Equal(g.PrevHash, w.PrevHash) || !bytes.Equal(g.Hash, w.Hash) {
			t.Fatalf("%s: entry %d:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

func listAudit(t *testing.T, s store.Store, f store.AuditFilter) []store.AuditEntry {
	t.Helper()
	got, err := s.ListAudit(t.Context(), f)
	noErr(t, err, "list audit")
	return got
}

func testAuditAppendAndList(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.LastAudit(ctx)
	wantErr(t, err, errs.ErrNotFound, "last of empty trail")
	if got := listAudit(t, s, store.AuditFilter{}); got == nil || len(got) != 0 {
		t.Fatalf("empty trail lists %v, want []", got)
	}
	chain := appendChain(t, s, 7)
	last, err := s.LastAudit(ctx)
	noErr(t, err, "last")
	checkAuditEntries(t, "last", []store.AuditEntry{last}, chain[6:])
	checkAuditEntries(t, "all", listAudit(t, s, store.AuditFilter{}), chain)
	checkAuditEntries(t, "after 4", listAudit(t, s, store.AuditFilter{AfterSeq: 4}), chain[4:])
	checkAuditEntries(t, "limit 2 after 1", listAudit(t, s, store.AuditFilter{AfterSeq: 1, Limit: 2}), chain[1:3])
	checkAuditEntries(t, "since at(5)", listAudit(t, s, store.AuditFilter{Since: at(5)}), chain[4:])
	checkAuditEntries(t, "tenant acme", listAudit(t, s, store.AuditFilter{Tenant: "acme"}),
		[]store.AuditEntry{chain[2], chain[5]})
	checkAuditEntries(t, "tenant ghost", listAudit(t, s, store.AuditFilter{Tenant: "ghost"}), nil)
}

func testAuditAppendRejectsBrokenChain(t *testing.T, s store.Store) {
	ctx := t.Context()
	zero := make([]byte, 32)
	wantErr(t, s.AppendAudit(ctx, auditEntry(2, zero, "", at(0))), errs.ErrConflict, "seq 2 on an empty trail")
	wantErr(t, s.AppendAudit(ctx, auditEntry(0, zero, "", at(0))), errs.ErrInvalid, "seq 0")
	bad := auditEntry(1, zero, "", at(0))
	bad.Action = ""
	wantErr(t, s.AppendAudit(ctx, bad), errs.ErrInvalid, "empty action")
	bad = auditEntry(1, zero, "", at(0))
	bad.Hash = nil
	wantErr(t, s.AppendAudit(ctx, bad), errs.ErrInvalid, "empty hash")
	chain := appendChain(t, s, 2)
	wantErr(t, s.AppendAudit(ctx, auditEntry(2, chain[0].Hash, "", at(0))), errs.ErrConflict, "seq 2 again")
	wantErr(t, s.AppendAudit(ctx, auditEntry(4, chain[1].Hash, "", at(0))), errs.ErrConflict, "gap")
	wantErr(t, s.AppendAudit(ctx, auditEntry(3, chain[0].Hash, "", at(0))), errs.ErrConflict, "wrong prev hash")
	checkAuditEntries(t, "after refused appends", listAudit(t, s, store.AuditFilter{}), chain)
	noErr(t, s.AppendAudit(ctx, auditEntry(3, chain[1].Hash, "", at(3))), "append 3")
}

func testAuditCheckpoints(t *testing.T, s store.Store) {
	ctx := t.Context()
	chain := appendChain(t, s, 4)
	cp := func(seq int64) store.AuditCheckpoint {
		return store.AuditCheckpoint{Seq: seq, Hash: chain[seq-1].Hash, Start: 1, Time: at(10 + int(seq)),
			KeyID: "k", Signature: []byte{byte(seq), 0, 0xff}}
	}
	noErr(t, s.PutAuditCheckpoint(ctx, cp(4)), "put 4")
	noErr(t, s.PutAuditCheckpoint(ctx, cp(2)), "put 2")
	wantErr(t, s.PutAuditCheckpoint(ctx, cp(2)), errs.ErrConflict, "put 2 again")
	beyond := cp(4)
	beyond.Seq = 5
	wantErr(t, s.PutAuditCheckpoint(ctx, beyond), errs.ErrInvalid, "checkpoint past the last entry")
	unsigned := cp(3)
	unsigned.Signature = nil
	wantErr(t, s.PutAuditCheckpoint(ctx, unsigned), errs.ErrInvalid, "unsigned checkpoint")
	got, err := s.ListAuditCheckpoints(ctx)
	noErr(t, err, "list checkpoints")
	if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 4 {
		t.Fatalf("checkpoints %+v, want seqs 2, 4", got)
	}
	want := cp(2)
	checkTime(t, "checkpoint time", got[0].Time, want.Time)
	if !bytes.Equal(got[0].Hash, want.Hash) || !bytes.Equal(got[0].Signature, want.Signature) || got[0].KeyID != "k" || got[0].Start != 1 {
		t.Fatalf("checkpoint 2 = %+v, want %+v", got[0], want)
	}
}

func testAuditPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	chain := appendChain(t, s, 6)
	cp := func(seq, start int64) store.AuditCheckpoint {
		return store.AuditCheckpoint{Seq: seq, Hash: chain[seq-1].Hash, Start: start, Time: at(20), KeyID: "k", Signature: []byte{1}}
	}
	noErr(t, s.PutAuditCheckpoint(ctx, cp(2, 1)), "put 2")
	noErr(t, s.PutAuditCheckpoint(ctx, cp(4, 1)), "put 4")
	_, err := s.PruneAudit(ctx, 3, cp(6, 3))
	wantErr(t, err, errs.ErrInvalid, "prune to an unsigned seq")
	past := cp(6, 4)
	past.Seq = 7
	_, err = s.PruneAudit(ctx, 4, past)
	wantErr(t, err, errs.ErrInvalid, "head past the last entry")
	checkAuditEntries(t, "after refused prunes", listAudit(t, s, store.AuditFilter{}), chain)

	n, err := s.PruneAudit(ctx, 4, cp(6, 4))
	noErr(t, err, "prune")
	if n != 3 {
		t.Errorf("pruned %d entries, want 3", n)
	}
	checkAuditEntries(t, "after prune", listAudit(t, s, store.AuditFilter{}), chain[3:])
	cps, err := s.ListAuditCheckpoints(ctx)
	noErr(t, err, "list checkpoints")
	if len(cps) != 2 || cps[0].Seq != 4 || cps[1].Seq != 6 || cps[1].Start != 4 {
		t.Fatalf("checkpoints after prune %+v, want 4 and 6 (start 4)", cps)
	}
	// Pruning to the head replaces the head's checkpoint; the last entry
	// stays, so the chain goes on from it.
	_, err = s.PruneAudit(ctx, 6, cp(6, 6))
	noErr(t, err, "prune to head")
	checkAuditEntries(t, "after prune to head", listAudit(t, s, store.AuditFilter{}), chain[5:])
	cps, _ = s.ListAuditCheckpoints(ctx)
	if len(cps) != 1 || cps[0].Seq != 6 || cps[0].Start != 6 {
		t.Fatalf("checkpoints after prune to head %+v", cps)
	}
	noErr(t, s.AppendAudit(ctx, auditEntry(7, chain[5].Hash, "", at(7))), "append after prune")
}

func testAuditSurvivesPurge(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createSandbox(t, s, newSandbox("sb-1", "acme", "web", at(0)))
	chain := appendChain(t, s, 3) // entry 3 is acme's, target sb-3; 1 targets sb-1
	noErr(t, s.DeleteSandbox(ctx, "acme", "sb-1"), "purge sandbox")
	checkAuditEntries(t, "after purge", listAudit(t, s, store.AuditFilter{}), chain)
}

func testAuditConcurrentAppends(t *testing.T, s store.Store) {
	ctx := t.Context()
	const workers, each = 8, 10
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				seq, prev := int64(1), make([]byte, 32)
				last, err := s.LastAudit(ctx)
				switch {
				case err == nil:
					seq, prev = last.Seq+1, last.Hash
				case !errors.Is(err, errs.ErrNotFound):
					errc <- err
					return
				}
				e := auditEntry(seq, prev, "", at(w))
				switch err := s.AppendAudit(ctx, e); {
				case err == nil:
					done++
				case !errors.Is(err, errs.ErrConflict):
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	got := listAudit(t, s, store.AuditFilter{})
	if len(got) != workers*each {
		t.Fatalf("%d entries, want %d", len(got), workers*each)
	}
	prev := make([]byte, 32)
	for i, e := range got {
		if e.Seq != int64(i+1) || !bytes.Equal(e.PrevHash, prev) {
			t.Fatalf("entry %d: seq %d, prev %x, want %x: the chain forked", i, e.Seq, e.PrevHash, prev)
		}
		prev = e.Hash
	}
}

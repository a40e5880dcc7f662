package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// verifyPage is how many entries Verify reads at a time.
const verifyPage = 1000

// maxProblems caps the problems one report lists.
const maxProblems = 50

// Verify walks the whole trail and checks every link, every entry's hash,
// every checkpoint (signature, and that it matches the chain) and compares
// the database with the witnesses. The returned report is OK, or lists
// what was found (Problems), the first by seq also as BadSeq and Problem:
// an edited entry (its hash no longer matches its fields), a deleted one
// (a gap in seq, or entries missing at the front), an inserted or
// reordered one (a broken link or a hash over the wrong seq), entries
// missing at the end (a signed checkpoint, a witness or the running
// daemon's own head is past the last entry), a chain rewritten
// consistently (it no longer matches a signed hash), a signed checkpoint
// missing from the database (one a witness or this daemon signed), a row
// the store cannot decode, or a witness that is missing, unreadable or
// signed by another key. The error is for failures to read the trail only.
func (l *Log) Verify(ctx context.Context) (client.AuditReport, error) {
	l.pruneMu.RLock()
	defer l.pruneMu.RUnlock()
	// Head and checkpoints together: a checkpoint is only ever signed of
	// the head under mu, so any checkpoint past this head is not one
	// signed while we read.
	l.mu.Lock()
	if l.opts.Shared {
		// Other nodes append too: the trail's head is the store's.
		if last, err := l.st.LastAudit(ctx); err == nil && last.Seq > l.head.Seq {
			l.head = last
		}
	}
	head, mine := l.head, l.signed
	cps, err := l.st.ListAuditCheckpoints(ctx)
	l.mu.Unlock()
	if err != nil {
		return client.AuditReport{}, fmt.Errorf("verify audit trail: %w", err)
	}

	rep := client.AuditReport{OK: true, KeyID: l.keyID, PublicKey: hex.EncodeToString(l.pub),
		Problems: []client.AuditProblem{}, Witnesses: []client.AuditWitness{}}
	seen := map[string]bool{}
	fail := func(seq int64, kind, format string, a ...any) {
		text := fmt.Sprintf(format, a...)
		if seen[text] {
			return
		}
		seen[text] = true
		rep.OK = false
		rep.Problems = append(rep.Problems, client.AuditProblem{Seq: seq, Kind: kind, Text: text})
	}

	signed := map[int64]store.AuditCheckpoint{}
	start := int64(1)
	for _, c := range cps {
		switch {
		case c.Malformed != "":
			fail(c.Seq, "malformed", "the signed checkpoint of seq %d is malformed in the database (%s)", c.Seq, c.Malformed)
			continue
		case c.KeyID != l.keyID || !ed25519.Verify(l.pub, SignedMessage(c), c.Signature):
			fail(c.Seq, "checkpoint-forged", "the checkpoint at seq %d is not validly signed by key %s: it was forged or altered", c.Seq, l.keyID)
			continue
		}
		signed[c.Seq] = c
		rep.Checkpoints++
		if c.Seq >= rep.SignedSeq {
			rep.SignedSeq, start = c.Seq, c.Start
		}
	}

	var prev *store.AuditEntry
	for after := int64(0); ; {
		page, err := l.st.ListAudit(ctx, store.AuditFilter{AfterSeq: after, Limit: verifyPage})
		if err != nil {
			return client.AuditReport{}, fmt.Errorf("verify audit trail: %w", err)
		}
		for i := range page {
			e := page[i]
			if e.Seq > head.Seq {
				break // appended after we took the head; checked below
			}
			switch {
			case prev == nil:
				rep.FirstSeq = e.Seq
				switch {
				case e.Seq > start:
					fail(start, "deleted", "entries %d to %d are missing: deleted from the front of the trail, which starts at %d", start, e.Seq-1, start)
				case e.Seq < start:
					fail(e.Seq, "inserted", "entry %d precedes seq %d, where the signed trail starts: inserted", e.Seq, start)
				case e.Seq == 1 && !bytes.Equal(e.PrevHash, make([]byte, sha256.Size)):
					fail(1, "relinked", "entry 1 does not start the chain (its prev_hash is not zero)")
				case e.Seq > 1:
					if _, ok := signed[e.Seq]; !ok {
						fail(e.Seq, "deleted", "the trail starts at entry %d, but no signed checkpoint anchors it", e.Seq)
					}
				}
			case e.Seq != prev.Seq+1:
				fail(prev.Seq+1, "deleted", "entry %d is missing: deleted", prev.Seq+1)
			case !bytes.Equal(e.PrevHash, prev.Hash):
				fail(e.Seq, "relinked", "entry %d does not link to entry %d: an entry was inserted, removed, replaced or reordered here", e.Seq, prev.Seq)
			}
			sum := HashEntry(e)
			switch {
			case e.Malformed != "":
				fail(e.Seq, "malformed", "entry %d is malformed in the database (%s)", e.Seq, e.Malformed)
			case !bytes.Equal(sum, e.Hash):
				fail(e.Seq, "altered", "entry %d was altered: its hash does not match its contents (or its seq)", e.Seq)
			}
			if c, ok := signed[e.Seq]; ok && !bytes.Equal(c.Hash, sum) {
				fail(e.Seq, "rewritten", "entry %d does not match the signed checkpoint of seq %d: the chain was rewritten at or before it", e.Seq, e.Seq)
			}
			rep.Entries++
			rep.LastSeq = e.Seq
			prev = &page[i]
		}
		if len(page) < verifyPage || (prev != nil && prev.Seq >= head.Seq) {
			break
		}
		after = page[len(page)-1].Seq
	}

	switch {
	case head.Seq == 0:
	case rep.LastSeq < head.Seq:
		fail(rep.LastSeq+1, "truncated", "entries %d to %d are missing: the trail was truncated (this daemon appended up to seq %d)", rep.LastSeq+1, head.Seq, head.Seq)
	case !bytes.Equal(prev.Hash, head.Hash):
		fail(head.Seq, "rewritten", "entry %d differs from the one this daemon appended: the chain was rewritten at or before it", head.Seq)
	}
	for seq, c := range signed {
		if seq > rep.LastSeq {
			fail(rep.LastSeq+1, "truncated", "entries %d to %d are missing: the trail was truncated (a checkpoint signed %s covers seq %d)",
				rep.LastSeq+1, seq, c.Time.Format("2006-01-02T15:04:05Z"), seq)
		}
	}
	if mine.Seq > 0 && mine.Seq >= start {
		if _, ok := signed[mine.Seq]; !ok {
			fail(mine.Seq, "checkpoint-missing", "the signed checkpoint of seq %d, which this daemon made, is missing from the database: deleted", mine.Seq)
		}
	}
	// Anything past the head now was not appended by this daemon.
	l.mu.Lock()
	now := l.head.Seq
	extra, err := l.st.ListAudit(ctx, store.AuditFilter{AfterSeq: now, Limit: 1})
	l.mu.Unlock()
	if err != nil {
		return client.AuditReport{}, fmt.Errorf("verify audit trail: %w", err)
	}
	if len(extra) > 0 && !l.opts.Shared {
		fail(extra[0].Seq, "inserted", "entry %d was not appended by this daemon: inserted", extra[0].Seq)
	}

	l.remoteMu.Lock()
	remote := l.remote
	l.remoteMu.Unlock()
	for _, w := range []Witness{l.opts.Witness, remote} {
		if w == nil {
			continue
		}
		wr, err := l.compareWitness(ctx, w, start, rep.LastSeq, len(signed) > 0, signed, fail)
		if err != nil {
			return client.AuditReport{}, fmt.Errorf("verify audit trail: %w", err)
		}
		rep.Witnesses = append(rep.Witnesses, wr)
	}

	if rep.SignedSeq > 0 {
		rep.Unsigned = max(rep.LastSeq-rep.SignedSeq, 0)
	} else {
		rep.Unsigned = rep.Entries
	}
	// By seq; problems of the trail as a whole (seq 0) last.
	order := func(seq int64) uint64 { return uint64(seq - 1) }
	sort.SliceStable(rep.Problems, func(i, j int) bool { return order(rep.Problems[i].Seq) < order(rep.Problems[j].Seq) })
	if n := len(rep.Problems); n > maxProblems {
		rep.Problems = append(rep.Problems[:maxProblems-1], client.AuditProblem{Kind: "more",
			Text: fmt.Sprintf("%d more problems not listed", n-maxProblems+1)})
	}
	if !rep.OK {
		rep.BadSeq, rep.Problem = rep.Problems[0].Seq, rep.Problems[0].Text
		if rep.BadSeq == 0 {
			rep.BadSeq = max(rep.LastSeq, 1)
		}
	}
	return rep, nil
}

// compareWitness compares the database with the checkpoint w holds;
// anySigned says whether the database holds a valid checkpoint, signed
// its valid checkpoints by seq.
func (l *Log) compareWitness(ctx context.Context, w Witness, start, last int64, anySigned bool,
	signed map[int64]store.AuditCheckpoint, fail func(seq int64, kind, format string, a ...any)) (client.AuditWitness, error) {
	wr := client.AuditWitness{Name: w.Name()}
	_, remote := w.(*RepoWitness)
	p, err := w.Load(ctx)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		wr.Note = "holds no checkpoint"
		// Open and every checkpoint write the local witness, so once the
		// database holds a checkpoint, a missing witness was removed. The
		// repository's may simply not have been written yet; nor may a
		// node's of a shared trail whose checkpoints the others signed.
		if anySigned && !remote && !l.opts.Shared {
			wr.Note = "missing, although the database holds signed checkpoints: removed"
			fail(0, "witness", "the audit witness (%s) is missing, although the database holds signed checkpoints: it was removed", w.Name())
		}
		return wr, nil
	case errors.Is(err, errs.ErrInvalid) || (err != nil && !remote):
		wr.Note = "unreadable: " + err.Error()
		fail(0, "witness", "the audit witness (%s) is unreadable: %v", w.Name(), err)
		return wr, nil
	case err != nil:
		wr.Note = "unavailable: " + err.Error()
		return wr, nil
	}
	wr.Seq, wr.Hash, wr.Start, wr.Time = p.Seq, hex.EncodeToString(p.Hash), p.Start, p.Time
	when := p.Time.Format("2006-01-02T15:04:05Z")
	if p.KeyID != l.keyID || !ed25519.Verify(l.pub, SignedMessage(p), p.Signature) {
		wr.Note = "not validly signed by this daemon's key"
		fail(p.Seq, "witness", "the audit witness (%s) holds a checkpoint of seq %d not validly signed by key %s (it names key %q): the audit key was replaced or the witness forged",
			w.Name(), p.Seq, l.keyID, p.KeyID)
		return wr, nil
	}
	if p.Seq < start {
		wr.OK, wr.Note = true, fmt.Sprintf("older than the trail's start (seq %d): pruned since", start)
		return wr, nil
	}
	if p.Seq > last {
		wr.Note = fmt.Sprintf("the database ends at seq %d", last)
		fail(last+1, "truncated", "entries %d to %d are missing: the trail was truncated (the witness in %s holds a checkpoint of seq %d signed %s)",
			last+1, p.Seq, w.Name(), p.Seq, when)
		return wr, nil
	}
	es, err := l.st.ListAudit(ctx, store.AuditFilter{AfterSeq: p.Seq - 1, Limit: 1})
	if err != nil {
		return wr, err
	}
	if len(es) != 1 || es[0].Seq != p.Seq {
		wr.Note = fmt.Sprintf("the database has no entry %d", p.Seq)
		fail(p.Seq, "deleted", "entry %d is missing: the witness in %s signed it %s", p.Seq, w.Name(), when)
		return wr, nil
	}
	if !bytes.Equal(es[0].Hash, p.Hash) || !bytes.Equal(HashEntry(es[0]), p.Hash) {
		wr.Note = fmt.Sprintf("entry %d differs from the one it signed", p.Seq)
		fail(p.Seq, "rewritten", "entry %d differs from the one the witness in %s signed %s: the chain was rewritten at or before it",
			p.Seq, w.Name(), when)
		return wr, nil
	}
	if c, ok := signed[p.Seq]; !ok || checkpointReplaced(c, p) {
		wr.Note = fmt.Sprintf("the database lacks the signed checkpoint of seq %d", p.Seq)
		since := ""
		if ok {
			since = fmt.Sprintf(" (the one there now was signed %s, after it was gone)", c.Time.Format("2006-01-02T15:04:05Z"))
		}
		fail(p.Seq, "checkpoint-missing", "the signed checkpoint of seq %d (signed %s, kept by the witness in %s) is missing from the database: deleted%s",
			p.Seq, when, w.Name(), since)
		return wr, nil
	}
	wr.OK = true
	return wr, nil
}

package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store"
)

// verifyPage is how many entries Verify reads at a time.
const verifyPage = 1000

// Verify walks the whole trail and checks every link, every entry's hash
// and every checkpoint (signature, and that it matches the chain). The
// returned report is OK, or names the first seq at which the trail was
// found altered (BadSeq) and why: an edited entry (its hash no longer
// matches its fields), a deleted one (a gap in seq, or entries missing at
// the front or the end), an inserted or reordered one (a broken link or a
// hash over the wrong seq), an entry the running daemon did not write, or
// a chain rewritten consistently (it no longer matches a signed
// checkpoint: the seq reported is the checkpoint's, the rewrite is at or
// before it). The error is for failures to read the trail only.
func (l *Log) Verify(ctx context.Context) (client.AuditReport, error) {
	l.pruneMu.RLock()
	defer l.pruneMu.RUnlock()
	l.mu.Lock()
	head := l.head
	l.mu.Unlock()

	rep := client.AuditReport{OK: true, KeyID: l.keyID, PublicKey: hex.EncodeToString(l.pub)}
	fail := func(seq int64, format string, a ...any) {
		if !rep.OK && seq >= rep.BadSeq {
			return
		}
		rep.OK, rep.BadSeq, rep.Problem = false, seq, fmt.Sprintf(format, a...)
	}

	cps, err := l.st.ListAuditCheckpoints(ctx)
	if err != nil {
		return client.AuditReport{}, fmt.Errorf("verify audit trail: %w", err)
	}
	signed := map[int64]store.AuditCheckpoint{}
	start := int64(1)
	for _, c := range cps {
		if c.Seq > head.Seq {
			continue // signed after we took the head
		}
		if c.KeyID != l.keyID || !ed25519.Verify(l.pub, SignedMessage(c), c.Signature) {
			fail(c.Seq, "the checkpoint at seq %d is not validly signed by key %s: it was forged or altered", c.Seq, l.keyID)
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
					fail(start, "entries %d to %d are missing: deleted from the front of the trail, which starts at %d", start, e.Seq-1, start)
				case e.Seq < start:
					fail(e.Seq, "entry %d precedes seq %d, where the signed trail starts: inserted", e.Seq, start)
				case e.Seq == 1 && !bytes.Equal(e.PrevHash, make([]byte, sha256.Size)):
					fail(1, "entry 1 does not start the chain (its prev_hash is not zero)")
				case e.Seq > 1:
					if _, ok := signed[e.Seq]; !ok {
						fail(e.Seq, "the trail starts at entry %d, but no signed checkpoint anchors it", e.Seq)
					}
				}
			case e.Seq != prev.Seq+1:
				fail(prev.Seq+1, "entry %d is missing: deleted", prev.Seq+1)
			case !bytes.Equal(e.PrevHash, prev.Hash):
				fail(e.Seq, "entry %d does not link to entry %d: an entry was inserted, removed, replaced or reordered here", e.Seq, prev.Seq)
			}
			sum := HashEntry(e)
			if !bytes.Equal(sum, e.Hash) {
				fail(e.Seq, "entry %d was altered: its hash does not match its contents (or its seq)", e.Seq)
			}
			if c, ok := signed[e.Seq]; ok && !bytes.Equal(c.Hash, sum) {
				fail(e.Seq, "entry %d does not match the signed checkpoint of seq %d: the chain was rewritten at or before it", e.Seq, e.Seq)
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
		fail(rep.LastSeq+1, "entries %d to %d are missing: the trail was truncated", rep.LastSeq+1, head.Seq)
	case !bytes.Equal(prev.Hash, head.Hash):
		fail(head.Seq, "entry %d differs from the one this daemon appended: the chain was rewritten at or before it", head.Seq)
	}
	for seq := range signed {
		if seq > rep.LastSeq {
			fail(rep.LastSeq+1, "entries %d to %d are missing: a signed checkpoint covers seq %d", rep.LastSeq+1, seq, seq)
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
	if len(extra) > 0 {
		fail(extra[0].Seq, "entry %d was not appended by this daemon: inserted", extra[0].Seq)
	}
	if rep.SignedSeq > 0 {
		rep.Unsigned = rep.LastSeq - rep.SignedSeq
	} else {
		rep.Unsigned = rep.Entries
	}
	return rep, nil
}

package repo_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/repo"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// copyTree copies a test tree (cp -a keeps modes, times and links; the
// copy has new inodes, as a fork's snapshot on the dir pool does).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
}

// damagePack flips a byte a third into a pack file of the local store
// (inside a blob: the header is at the end) and returns the pack's id.
func (f *faultRepo) damagePack(key string) seal.ID {
	f.t.Helper()
	damage(f.t, filepath.Join(f.local.Dir(), key), func(b []byte) []byte { b[len(b)/3] ^= 0x20; return b })
	id, err := seal.ParseID(filepath.Base(key))
	must(f.t, err)
	return id
}

func (f *faultRepo) restoreOf(sc *repo.Scope, m *repo.Manifest) (string, error) {
	f.t.Helper()
	dst := filepath.Join(f.t.TempDir(), "dst")
	_, err := sc.Restore(context.Background(), m.ID, dst, repo.RestoreOptions{})
	return dst, err
}

// TestCheckMarksDamagedPackSoThatAPushUploadsItsBlobsAgain: a pack of a
// pushed snapshot is damaged on disk; check --read-data names the pack
// and the snapshot and marks the pack in the repository. A repository
// opened afresh (as on another machine) then pushes a copy of the same
// tree (a fork) uploading the blobs only the damaged pack held: the new
// snapshot restores exactly, and so, now that its blobs have an intact
// copy, does the old one.
func TestCheckMarksDamagedPackSoThatAPushUploadsItsBlobsAgain(t *testing.T) {
	ctx := context.Background()
	f := newFaultRepo(t)
	packs := storeKeys(t, f.local, "scopes/"+faultScope+"/data/")
	bad := f.damagePack(packs[len(packs)/2])

	if _, err := f.restore(); err == nil {
		t.Fatal("restore through a damaged pack succeeded")
	}
	res, err := f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if res.OK() || len(res.DamagedPacks) != 1 || res.DamagedPacks[0].Pack != bad || len(res.DamagedPacks[0].Blobs) == 0 {
		t.Fatalf("check: damaged packs %+v, want exactly %s with its lost blobs", res.DamagedPacks, bad)
	}
	if len(res.DamagedSnapshots) != 1 || res.DamagedSnapshots[0].ID != f.m.ID || res.DamagedSnapshots[0].Source != "s" ||
		!slices.Contains(res.DamagedSnapshots[0].Packs, bad) {
		t.Fatalf("check: damaged snapshots %+v, want %s naming pack %s", res.DamagedSnapshots, f.m.ID, bad)
	}
	if marks := storeKeys(t, f.local, "scopes/"+faultScope+"/records/damage/"); len(marks) != 1 {
		t.Fatalf("damage marks in the repository: %v", marks)
	}
	// A structure check on a fresh repository still names them (from the mark).
	res, err = f.scope().Check(ctx, repo.CheckOptions{})
	must(t, err)
	if res.OK() || len(res.DamagedPacks) != 1 || len(res.DamagedSnapshots) != 1 {
		t.Fatalf("structure check after the mark: %+v", res)
	}

	fork := filepath.Join(t.TempDir(), "fork")
	copyTree(t, f.src, fork)
	sc := f.scope() // a new Repository: only the mark in the store tells it
	m2, st, err := sc.Push(ctx, fork, repo.PushOptions{Parent: f.m.ID, Source: "fork"})
	must(t, err)
	if st.BlobsReplaced == 0 || st.BytesUploaded < 16<<10 {
		t.Fatalf("push of the fork: %+v, want the damaged pack's blobs uploaded again", st)
	}
	dst, err := f.restoreOf(f.scope(), m2)
	must(t, err)
	if digest(t, dst) != f.want {
		t.Fatal("the fork's push does not restore exactly")
	}
	dst, err = f.restoreOf(f.scope(), f.m)
	must(t, err)
	if digest(t, dst) != f.want {
		t.Fatal("the old snapshot does not restore exactly once its blobs are stored again")
	}
	// The same sandbox pushed again (unchanged, incremental) after the
	// mark reuses nothing of the damaged pack either.
	m3, _, err := f.scope().Push(ctx, f.src, repo.PushOptions{Parent: m2.ID, Source: "s"})
	must(t, err)
	dst, err = f.restoreOf(f.scope(), m3)
	must(t, err)
	if digest(t, dst) != f.want {
		t.Fatal("the incremental push does not restore exactly")
	}

	// Repair: the damaged pack leaves the index and the store; nothing is damaged.
	rr, err := f.scope().Repair(ctx, repo.RepairOptions{})
	must(t, err)
	if !slices.Equal(rr.PacksRemoved, []seal.ID{bad}) || len(rr.Damaged) != 0 {
		t.Fatalf("repair: %+v", rr)
	}
	res, err = f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if !res.OK() || len(res.DamagedPacks) != 0 || len(res.Warnings) != 0 {
		t.Fatalf("check after repair: %+v", res)
	}
}

// TestRepairHealsFromALocalCopyAndListsWhatItCannot: two snapshots each
// lose a blob to a damaged pack; repair is given a local copy of the
// first (not identical: it has one more file) and none of the second. It
// salvages the intact blobs of both packs, uploads what the first lacks
// from the copy, deletes both packs, and lists the second as still
// damaged; the first restores exactly, and check names only the second.
func TestRepairHealsFromALocalCopyAndListsWhatItCannot(t *testing.T) {
	ctx := context.Background()
	f := newFaultRepo(t)
	packs1 := storeKeys(t, f.local, "scopes/"+faultScope+"/data/")
	src2 := filepath.Join(t.TempDir(), "src2")
	must(t, os.MkdirAll(src2, 0o755))
	must(t, os.WriteFile(filepath.Join(src2, "other.bin"), randBytes(777, 400<<10), 0o644))
	m2, _, err := f.scope().Push(ctx, src2, repo.PushOptions{Source: "s2"})
	must(t, err)
	var packs2 []string
	for _, k := range storeKeys(t, f.local, "scopes/"+faultScope+"/data/") {
		if !slices.Contains(packs1, k) {
			packs2 = append(packs2, k)
		}
	}
	var held int64 // what the two packs to damage hold
	for _, k := range []string{packs1[0], packs2[0]} {
		fi, err := os.Stat(filepath.Join(f.local.Dir(), k))
		must(t, err)
		held += fi.Size()
	}
	bad1, bad2 := f.damagePack(packs1[0]), f.damagePack(packs2[0])
	res, err := f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if len(res.DamagedPacks) != 2 || len(res.DamagedSnapshots) != 2 {
		t.Fatalf("check: %d damaged packs, %d damaged snapshots, want 2 and 2: %+v", len(res.DamagedPacks), len(res.DamagedSnapshots), res)
	}

	cp := filepath.Join(t.TempDir(), "copy")
	copyTree(t, f.src, cp)
	must(t, os.WriteFile(filepath.Join(cp, "extra.bin"), randBytes(999, 300<<10), 0o644))
	var progressed bool
	rr, err := f.scope().Repair(ctx, repo.RepairOptions{
		Sources: func(m *repo.Manifest) []repo.RepairSource {
			if m.ID == f.m.ID {
				return []repo.RepairSource{{Dir: cp, Name: "local copy"}}
			}
			return []repo.RepairSource{{Dir: t.TempDir(), Name: "empty"}}
		},
		Progress: func(repo.Progress) { progressed = true },
	})
	must(t, err)
	slices.SortFunc(rr.PacksRemoved, func(a, b seal.ID) int { return compareIDs(a, b) })
	want := []seal.ID{bad1, bad2}
	slices.SortFunc(want, compareIDs)
	if !slices.Equal(rr.PacksRemoved, want) || rr.BlobsSalvaged == 0 || rr.BlobsUploaded == 0 || !progressed {
		t.Fatalf("repair: %+v", rr)
	}
	if len(rr.Repaired) != 1 || rr.Repaired[0].ID != f.m.ID || rr.Repaired[0].From != "local copy" {
		t.Fatalf("repaired %+v, want %s from the local copy", rr.Repaired, f.m.ID)
	}
	if len(rr.Damaged) != 1 || rr.Damaged[0].ID != m2.ID || rr.Damaged[0].Source != "s2" {
		t.Fatalf("still damaged %+v, want %s", rr.Damaged, m2.ID)
	}
	// The copy's extra file was not uploaded: only what the snapshot lacked.
	for _, k := range []string{packs1[0], packs2[0]} {
		if _, err := os.Stat(filepath.Join(f.local.Dir(), k)); err == nil {
			t.Fatalf("damaged pack %s is still stored", k)
		}
	}
	// Salvage and heal upload again what the damaged packs held, and
	// maybe a chunk cut anew (Max, 64 KiB here); a pack is cut once past
	// PackSize (128 KiB here), so each held up to PackSize+Max. The copy's
	// extra file is 300 KiB: uploaded too, it would exceed the first bound
	// (not always the second: the packs may be small).
	const packSize, maxChunk = 128 << 10, 64 << 10
	if rr.BytesUploaded > held+maxChunk || rr.BytesUploaded > 2*(packSize+maxChunk)+maxChunk {
		t.Fatalf("repair uploaded %d bytes: more than the damaged packs held (%d) and a chunk (the copy's extra file went up too)", rr.BytesUploaded, held)
	}
	dst, err := f.restore()
	must(t, err)
	if digest(t, dst) != f.want {
		t.Fatal("repaired snapshot does not restore exactly")
	}
	if marks := storeKeys(t, f.local, "scopes/"+faultScope+"/records/damage/"); len(marks) != 0 {
		t.Fatalf("damage marks left: %v", marks)
	}
	res, err = f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if res.OK() || len(res.DamagedPacks) != 0 || len(res.DamagedSnapshots) != 1 || res.DamagedSnapshots[0].ID != m2.ID {
		t.Fatalf("check after repair: %+v", res)
	}
	// A second repair changes nothing and says the same.
	rr, err = f.scope().Repair(ctx, repo.RepairOptions{})
	must(t, err)
	if len(rr.PacksRemoved) != 0 || len(rr.Repaired) != 0 || len(rr.Damaged) != 1 {
		t.Fatalf("second repair: %+v", rr)
	}
}

func compareIDs(a, b seal.ID) int {
	switch {
	case a.String() < b.String():
		return -1
	case a.String() > b.String():
		return 1
	}
	return 0
}

// TestRepairKilledAnywhereLosesNothingReadable checks the repair sentences
// of doc.go's "Damaged packs": in each trial a pack is damaged on disk and
// marked by check --read-data in the parent, then a child repairs (its
// source tree is the exact local copy) and is killed just before or after
// its n-th write. After every kill, check --read-data of the repository
// opened afresh finds nothing wrong but the damaged pack and the blobs it
// lost ("every blob that was readable before it readable through a live
// index"); a repair in the parent then completes, every manifest restores
// exactly, and after a prune check --read-data is clean with no warning.
func TestRepairKilledAnywhereLosesNothingReadable(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	c := newCrashRig(t, 256<<10)
	src := newCrashTree(t, c.base, 4, 21)
	c.pushNow(src.dir, nil)
	src.change(0.3)
	c.pushNow(src.dir, c.latest()) // the latest manifest is the source tree
	c.forgetAllBut(1)
	c.pruneClean()
	env := []string{envCrashPath + "=" + src.dir}
	writes := 8
	phases := map[string]int{}
	for trial := range 16 {
		// Damage a random indexed pack and let a check mark it.
		packs := listStore(t, func() blobstore.BlobStore { _, st := c.open(); return st }(), "scopes/"+crashScope+"/data/")
		key, _, _ := strings.Cut(packs[c.rng.IntN(len(packs))], " ")
		bad := filepath.Base(key)
		damage(t, filepath.Join(c.dir, key), func(b []byte) []byte { b[len(b)/3] ^= 0x10; return b })
		sc, _ := c.open()
		res, err := sc.Check(ctx, repo.CheckOptions{ReadData: true})
		must(t, err)
		if len(res.DamagedPacks) != 1 || res.DamagedPacks[0].Pack.String() != bad {
			t.Fatalf("trial %d: check marked %+v, want %s", trial, res.DamagedPacks, bad)
		}
		lost := res.DamagedPacks[0].Blobs
		before := c.objects()
		killed := c.pointTrial("repair", &writes, env...)
		after := c.objects()
		phase := "finished"
		if killed {
			switch {
			case !added(before.packs, after.packs) && !added(before.index, after.index):
				phase = "before-first-write"
			case slices.ContainsFunc(after.packs, func(k string) bool { return strings.Contains(k, bad) }) &&
				!removed(before.index, after.index):
				phase = "new-packs-old-index-files-kept"
			case slices.ContainsFunc(after.packs, func(k string) bool { return strings.Contains(k, bad) }):
				phase = "old-index-files-deleted-damaged-pack-not"
			default:
				phase = "damaged-pack-deleted"
			}
		}
		phases[phase]++

		sc, _ = c.open()
		res, err = sc.Check(ctx, repo.CheckOptions{ReadData: true})
		must(t, err)
		for _, e := range res.Errors {
			if strings.Contains(e, bad) || slices.ContainsFunc(lost, func(id seal.ID) bool { return strings.Contains(e, id.String()) }) {
				continue
			}
			t.Fatalf("trial %d (killed %v, %s): check error beyond the damaged pack %s and its lost blobs: %s", trial, killed, phase, bad, e)
		}
		sc, _ = c.open()
		_, err = sc.Repair(ctx, repo.RepairOptions{Sources: func(*repo.Manifest) []repo.RepairSource {
			return []repo.RepairSource{{Dir: src.dir, Exact: true, Name: "source"}}
		}})
		must(t, err)
		c.verify(true)
		c.pruneClean()
	}
	t.Logf("repair kills by what they left: %v; %d point trials, %d killed; %s", phases, c.pointTrials, c.pointKilled, time.Since(start).Round(time.Millisecond))
	if c.pointKilled < c.pointTrials/2 {
		t.Fatalf("only %d of %d repairs were killed", c.pointKilled, c.pointTrials)
	}
}

// TestCheckProgressEndsOnTheTotalOfEveryScope: a read-data check of two
// scopes reports progress whose total, from the first report on, is the
// size of every pack of both, and whose last report reaches it.
func TestCheckProgressEndsOnTheTotalOfEveryScope(t *testing.T) {
	ctx := context.Background()
	r, store, _ := newRepo(t)
	var scopes []*repo.Scope
	for i, name := range []string{"t-one", "t-two"} {
		sc, err := r.Scope(ctx, name, true)
		must(t, err)
		src := filepath.Join(t.TempDir(), "src")
		must(t, os.MkdirAll(src, 0o755))
		must(t, os.WriteFile(filepath.Join(src, "f"), randBytes(uint64(i+1), (i+1)<<20), 0o644))
		_, _, err = sc.Push(ctx, src, repo.PushOptions{Source: "s"})
		must(t, err)
		scopes = append(scopes, sc)
	}
	var want, packs int64
	infos, err := store.List(ctx, "scopes/")
	must(t, err)
	for _, in := range infos {
		if strings.Contains(in.Key, "/data/") {
			want += in.Size
			packs++
		}
	}
	var seen []repo.Progress
	res, err := repo.CheckScopes(ctx, scopes, repo.CheckOptions{ReadData: true, Progress: func(p repo.Progress) { seen = append(seen, p) }})
	must(t, err)
	if len(res) != 2 || !res[0].OK() || !res[1].OK() || len(seen) < 3 {
		t.Fatalf("check: %+v, %d progress reports", res, len(seen))
	}
	for _, p := range seen {
		if p.BytesTotal != want || p.FilesTotal != packs || p.BytesDone > want {
			t.Fatalf("progress %+v, want totals %d bytes in %d packs throughout", p, want, packs)
		}
	}
	if last := seen[len(seen)-1]; last.BytesDone != want || last.FilesDone != packs || !last.Done {
		t.Fatalf("last progress %+v, want %d of %d bytes, done", last, want, want)
	}
}

// TestMissingPackIsMarkedByAStructureCheckAndRepairedFromACopy: a pack
// file deleted from the store is marked by a check without --read-data;
// a push of the same tree (incremental, unchanged) uploads what it held
// again, and repair takes the missing pack out of the index: the old
// snapshot restores exactly and check --read-data is clean.
func TestMissingPackIsMarkedByAStructureCheckAndRepairedFromACopy(t *testing.T) {
	ctx := context.Background()
	f := newFaultRepo(t)
	packs := storeKeys(t, f.local, "scopes/"+faultScope+"/data/")
	must(t, os.Remove(filepath.Join(f.local.Dir(), packs[0])))
	res, err := f.scope().Check(ctx, repo.CheckOptions{})
	must(t, err)
	if res.OK() || len(res.DamagedPacks) != 1 || !res.DamagedPacks[0].Missing || len(res.DamagedSnapshots) != 1 {
		t.Fatalf("structure check of a missing pack: %+v", res)
	}
	m2, st, err := f.scope().Push(ctx, f.src, repo.PushOptions{Parent: f.m.ID, Source: "s"})
	must(t, err)
	if st.BlobsReplaced == 0 {
		t.Fatalf("push after a missing pack: %+v", st)
	}
	rr, err := f.scope().Repair(ctx, repo.RepairOptions{})
	must(t, err)
	if len(rr.PacksRemoved) != 1 || len(rr.Damaged) != 0 || len(rr.Repaired) != 1 || rr.Repaired[0].ID != f.m.ID {
		t.Fatalf("repair: %+v", rr)
	}
	for _, m := range []*repo.Manifest{f.m, m2} {
		dst, err := f.restoreOf(f.scope(), m)
		must(t, err)
		if digest(t, dst) != f.want {
			t.Fatalf("snapshot %s does not restore exactly after repair", m.ID)
		}
	}
	res, err = f.scope().Check(ctx, repo.CheckOptions{ReadData: true})
	must(t, err)
	if !res.OK() || len(res.Warnings) != 0 {
		t.Fatalf("check after repair: %+v", res)
	}
}

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

const day = 24 * time.Hour

// retentionRig is the real service with a test clock, the real audit
// trail (seen through a recorder that notes, for every retention entry,
// whether its subject still existed when it was written, and that can be
// made to fail), and the events and log lines it gives.
type retentionRig struct {
	t     *testing.T
	s     *Service
	clock *testClock

	mu       sync.Mutex
	events   []events.Event
	entries  []string // "action target outcome [subject present]"
	auditErr error
	logBuf   bytes.Buffer
}

type rigRecorder struct {
	r   *retentionRig
	log *audit.Log
}

func (rr rigRecorder) Record(ctx context.Context, e audit.Entry) error {
	r := rr.r
	r.mu.Lock()
	fail := r.auditErr
	r.mu.Unlock()
	if fail != nil && strings.HasPrefix(e.Action, "retention.") {
		return fail
	}
	line := e.Action + " " + e.Target + " " + e.Outcome
	if strings.HasPrefix(e.Action, "retention.") {
		present := false
		if _, err := r.s.st.GetSandbox(ctx, e.Tenant, e.Target); err == nil {
			present = true
		} else if _, err := r.s.st.GetVolume(ctx, e.Tenant, e.Target); err == nil {
			present = true
		}
		line += fmt.Sprintf(" [present=%v]", present)
	}
	if err := rr.log.Record(ctx, e); err != nil {
		return err
	}
	r.mu.Lock()
	r.entries = append(r.entries, line)
	r.mu.Unlock()
	return nil
}

func (r *retentionRig) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logBuf.Write(p)
}

func newRetentionRig(t *testing.T) *retentionRig {
	t.Helper()
	s := newService(t)
	r := &retentionRig{t: t, s: s, clock: &testClock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}}
	s.opts.Now = r.clock.now
	s.log = slog.New(slog.NewTextHandler(r, nil))
	lg, err := audit.Open(context.Background(), s.st, filepath.Join(t.TempDir(), "audit.key"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close(context.Background()) })
	s.rec = rigRecorder{r: r, log: lg}
	s.opts.Events = events.SinkFunc(func(_ context.Context, e events.Event) {
		if e.Type == events.RetentionWarning {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		}
	})
	return r
}

// warnings returns the retention warnings emitted so far for id.
func (r *retentionRig) warnings(id string) []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Event
	for _, e := range r.events {
		if e.Data["subject_id"] == id {
			out = append(out, e)
		}
	}
	return out
}

// auditOf returns the audit lines about id.
func (r *retentionRig) auditOf(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.entries {
		if strings.Contains(l, " "+id+" ") {
			out = append(out, l)
		}
	}
	return out
}

func (r *retentionRig) logHas(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.logBuf.String(), s)
}

// at moves the clock to start+d and runs the policies once.
func (r *retentionRig) at(start time.Time, d time.Duration) {
	r.clock.mu.Lock()
	r.clock.t = start.Add(d)
	r.clock.mu.Unlock()
	r.s.PurgeExpired(context.Background())
}

func (r *retentionRig) sandboxExists(id string) bool {
	_, err := r.s.st.GetSandbox(context.Background(), store.DefaultTenant, id)
	if err != nil && !errors.Is(err, errs.ErrNotFound) {
		r.t.Fatal(err)
	}
	return err == nil
}

func (r *retentionRig) volumeExists(id string) bool {
	_, err := r.s.st.GetVolume(context.Background(), store.DefaultTenant, id)
	if err != nil && !errors.Is(err, errs.ErrNotFound) {
		r.t.Fatal(err)
	}
	return err == nil
}

func (r *retentionRig) deletedSandbox(name string) (client.Sandbox, time.Time) {
	r.t.Helper()
	ctx := context.Background()
	sb, err := r.s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: name, NoStart: true})
	if err != nil {
		r.t.Fatal(err)
	}
	del, err := r.s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return del, *del.DeletedAt
}

// TestRetentionDeletesNothingEarlyAndWarnsBefore is the test: a
// soft-deleted sandbox under purge_deleted_after 2d and warn_before 1d is
// left alone at 0.9 days, warned (event and log line, once) at 1 day and
// purged at 2 days, with its audit record written before it goes.
func TestRetentionDeletesNothingEarlyAndWarnsBefore(t *testing.T) {
	r := newRetentionRig(t)
	ctx := context.Background()
	tn := store.DefaultTenant

	// A sandbox deleted under the default policy gets the daemon's 30 days;
	// the tenant's new policy applies to it at once (from DeletedAt).
	sb, t0 := r.deletedSandbox("old")
	if !sb.PurgeAt.Equal(t0.Add(30 * day)) {
		t.Fatalf("purge_at under the default policy: %v, want %v", sb.PurgeAt, t0.Add(30*day))
	}
	if _, err := r.s.SetRetention(ctx, tn, client.RetentionPolicy{PurgeDeletedAfter: "2d", WarnBefore: "1d"}); err != nil {
		t.Fatal(err)
	}
	got, err := r.s.GetSandbox(ctx, tn, sb.ID)
	if err != nil || !got.PurgeAt.Equal(t0.Add(2*day)) {
		t.Fatalf("purge_at after the policy change: %+v %v, want %v", got.PurgeAt, err, t0.Add(2*day))
	}

	r.at(t0, 9*day/10)
	if len(r.warnings(sb.ID)) != 0 || !r.sandboxExists(sb.ID) {
		t.Fatalf("at 0.9d: warnings %v, exists %v; want none and kept", r.warnings(sb.ID), r.sandboxExists(sb.ID))
	}
	r.at(t0, day)
	w := r.warnings(sb.ID)
	if len(w) != 1 || !r.sandboxExists(sb.ID) {
		t.Fatalf("at 1d: warnings %v, exists %v; want one and kept", w, r.sandboxExists(sb.ID))
	}
	if w[0].Data["action"] != "purge" || w[0].Data["subject_kind"] != "sandbox" || w[0].Sandbox != sb.ID || w[0].Tenant != tn ||
		w[0].Data["due_at"] != t0.Add(2*day).Format(time.RFC3339) || w[0].Data["not_before"] != t0.Add(2*day).Format(time.RFC3339) {
		t.Fatalf("warning: %+v", w[0])
	}
	if !r.logHas("retention: automatic deletion ahead") || !r.logHas(sb.ID) {
		t.Fatalf("no log line of the warning:\n%s", r.logBuf.String())
	}
	r.at(t0, day+time.Hour)
	if n := len(r.warnings(sb.ID)); n != 1 {
		t.Fatalf("the warning was given %d times", n)
	}
	r.at(t0, 2*day-time.Minute)
	if !r.sandboxExists(sb.ID) || len(r.auditOf(sb.ID)) != 0 {
		t.Fatalf("purged early: exists %v, audit %v", r.sandboxExists(sb.ID), r.auditOf(sb.ID))
	}
	r.at(t0, 2*day)
	if r.sandboxExists(sb.ID) {
		t.Fatal("not purged when due and warned")
	}
	a := r.auditOf(sb.ID)
	wantFirst := fmt.Sprintf("retention.purge %s due %s, warned %s [present=true]", sb.ID,
		t0.Add(2*day).Format(time.RFC3339), t0.Add(day).Format(time.RFC3339))
	if len(a) != 2 || a[0] != wantFirst || a[1] != "sandbox.purge_expired "+sb.ID+" ok" {
		t.Fatalf("audit of the purge:\n%s\nwant first %q", strings.Join(a, "\n"), wantFirst)
	}
}

// TestRetentionPostponesAPurgeWhoseWarningCameLate: the daemon was "down"
// from 0.5 to 2.5 days: the warning comes at 2.5 days, PurgeAt moves to
// 3.5 days and nothing is purged before.
func TestRetentionPostponesAPurgeWhoseWarningCameLate(t *testing.T) {
	r := newRetentionRig(t)
	ctx := context.Background()
	if _, err := r.s.SetRetention(ctx, store.DefaultTenant, client.RetentionPolicy{PurgeDeletedAfter: "2d", WarnBefore: "1d"}); err != nil {
		t.Fatal(err)
	}
	sb, t0 := r.deletedSandbox("late")
	r.at(t0, day/2)
	r.at(t0, 2*day+day/2)
	w := r.warnings(sb.ID)
	if len(w) != 1 || !r.sandboxExists(sb.ID) {
		t.Fatalf("at 2.5d: warnings %v, exists %v; want the warning now and no purge", w, r.sandboxExists(sb.ID))
	}
	if w[0].Data["not_before"] != t0.Add(3*day+day/2).Format(time.RFC3339) {
		t.Fatalf("warning says not before %s, want 3.5d", w[0].Data["not_before"])
	}
	if got, _ := r.s.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.PurgeAt == nil || !got.PurgeAt.Equal(t0.Add(3*day+day/2)) {
		t.Fatalf("purge_at after the late warning: %v, want 3.5d", got.PurgeAt)
	}
	r.at(t0, 3*day+day/2-time.Minute)
	if !r.sandboxExists(sb.ID) {
		t.Fatal("purged less than warn_before after its warning")
	}
	r.at(t0, 3*day+day/2)
	if r.sandboxExists(sb.ID) {
		t.Fatal("not purged at 3.5d")
	}
}

// TestRetentionUndeleteCancelsAndAFailedAuditDeletesNothing: an undelete
// after the warning cancels the purge; a new delete has a new due time
// and a new warning; while the audit record cannot be written nothing is
// purged.
func TestRetentionUndeleteCancelsAndAFailedAuditDeletesNothing(t *testing.T) {
	r := newRetentionRig(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := r.s.SetRetention(ctx, tn, client.RetentionPolicy{PurgeDeletedAfter: "2d", WarnBefore: "1d"}); err != nil {
		t.Fatal(err)
	}
	sb, t0 := r.deletedSandbox("back")
	r.at(t0, day+day/5)
	if len(r.warnings(sb.ID)) != 1 {
		t.Fatal("no warning at 1.2d")
	}
	if _, err := r.s.UndeleteSandbox(ctx, tn, sb.ID); err != nil {
		t.Fatal(err)
	}
	r.at(t0, 2*day+day/10)
	got, err := r.s.GetSandbox(ctx, tn, sb.ID)
	if err != nil || got.State != "stopped" {
		t.Fatalf("after undelete and the old due time: %+v %v", got, err)
	}
	del, err := r.s.DeleteSandbox(ctx, tn, sb.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	t1 := *del.DeletedAt
	r.at(t1, day/10)
	if len(r.warnings(sb.ID)) != 1 {
		t.Fatal("a new delete was warned at once")
	}
	r.at(t1, day)
	w := r.warnings(sb.ID)
	if len(w) != 2 || w[1].Data["due_at"] != t1.Add(2*day).Format(time.RFC3339) {
		t.Fatalf("second warning: %+v", w)
	}
	r.mu.Lock()
	r.auditErr = errors.New("audit trail unavailable")
	r.mu.Unlock()
	r.at(t1, 2*day)
	if !r.sandboxExists(sb.ID) {
		t.Fatal("purged without its audit record")
	}
	if !r.logHas("retention: audit record failed; nothing deleted") {
		t.Fatal("no log line of the refused purge")
	}
	r.mu.Lock()
	r.auditErr = nil
	r.mu.Unlock()
	r.at(t1, 2*day+time.Minute)
	if r.sandboxExists(sb.ID) {
		t.Fatal("not purged once the audit trail works")
	}
}

// TestRetentionPurgesAVolumeOnlyAfterItsWarning: the same rule for a
// soft-deleted volume.
func TestRetentionPurgesAVolumeOnlyAfterItsWarning(t *testing.T) {
	r := newRetentionRig(t)
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := r.s.SetRetention(ctx, tn, client.RetentionPolicy{PurgeDeletedAfter: "2d", WarnBefore: "1d"}); err != nil {
		t.Fatal(err)
	}
	v, err := r.s.CreateVolume(ctx, tn, client.CreateVolumeRequest{Name: "data", SizeBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	del, err := r.s.DeleteVolume(ctx, tn, v.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	t0 := *del.DeletedAt
	if !del.PurgeAt.Equal(t0.Add(2 * day)) {
		t.Fatalf("volume purge_at %v, want the tenant's 2d", del.PurgeAt)
	}
	r.at(t0, 9*day/10)
	if len(r.warnings(v.ID)) != 0 || !r.volumeExists(v.ID) {
		t.Fatal("warned or purged at 0.9d")
	}
	r.at(t0, day)
	w := r.warnings(v.ID)
	if len(w) != 1 || w[0].Data["subject_kind"] != "volume" || w[0].Sandbox != "" || !r.volumeExists(v.ID) {
		t.Fatalf("at 1d: %+v, exists %v", w, r.volumeExists(v.ID))
	}
	r.at(t0, 2*day-time.Second)
	if !r.volumeExists(v.ID) {
		t.Fatal("volume purged early")
	}
	r.at(t0, 2*day)
	if r.volumeExists(v.ID) {
		t.Fatal("volume not purged when due and warned")
	}
	a := r.auditOf(v.ID)
	if len(a) != 2 || !strings.HasPrefix(a[0], "retention.purge "+v.ID+" due ") || !strings.HasSuffix(a[0], "[present=true]") || a[1] != "volume.purge_expired "+v.ID+" ok" {
		t.Fatalf("audit of the volume purge: %q", a)
	}
}

// TestRetentionDeletesAnArchivedSandboxAfterItsWarning: with
// delete_archived_after 5d and warn_before 1d an archived sandbox shows
// when it will be deleted, is warned at 4 days, soft-deleted at 5 (its
// pushes stay) and an undelete brings it back archived. The tenant's
// archive_stopped_after is its sandboxes' archive_after default.
func TestRetentionDeletesAnArchivedSandboxAfterItsWarning(t *testing.T) {
	r := newRetentionRig(t)
	withRepo(t, r.s, t.TempDir())
	ctx := context.Background()
	tn := store.DefaultTenant
	if _, err := r.s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.SetRetention(ctx, tn, client.RetentionPolicy{ArchiveStoppedAfter: "14d", DeleteArchivedAfter: "5d", WarnBefore: "1d"}); err != nil {
		t.Fatal(err)
	}
	sb, err := r.s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "cold", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := r.s.GetBackupPolicy(ctx, tn, sb.ID); err != nil || p.ArchiveAfter != (14*day).String() {
		t.Fatalf("backup policy under the tenant's archive_stopped_after: %+v %v", p, err)
	}
	op, err := r.s.ArchiveSandbox(ctx, tn, sb.ID, true)
	opDone(t, op, err, nil)
	t0 := r.clock.now()
	got, err := r.s.GetSandbox(ctx, tn, sb.ID)
	if err != nil || got.State != "archived" || got.DeleteAt == nil || !got.DeleteAt.Equal(t0.Add(5*day)) {
		t.Fatalf("archived sandbox: %+v %v, want delete_at %v", got, err, t0.Add(5*day))
	}
	r.at(t0, 4*day-time.Minute)
	if len(r.warnings(sb.ID)) != 0 {
		t.Fatal("warned before 4d")
	}
	r.at(t0, 4*day)
	w := r.warnings(sb.ID)
	if len(w) != 1 || w[0].Data["action"] != "delete" {
		t.Fatalf("at 4d: %+v", w)
	}
	r.at(t0, 5*day-time.Minute)
	if got, _ := r.s.GetSandbox(ctx, tn, sb.ID); got.State != "archived" {
		t.Fatalf("deleted early: %s", got.State)
	}
	r.at(t0, 5*day)
	got, err = r.s.GetSandbox(ctx, tn, sb.ID)
	if err != nil || got.State != "deleted" || got.PurgeAt == nil || !got.PurgeAt.Equal(t0.Add(5*day+30*day)) {
		t.Fatalf("at 5d: %+v %v, want deleted, purge in 30d", got, err)
	}
	if a := r.auditOf(sb.ID); len(a) < 2 || !strings.HasPrefix(a[len(a)-2], "retention.delete "+sb.ID+" due ") || a[len(a)-1] != "sandbox.retention_delete "+sb.ID+" ok" {
		t.Fatalf("audit of the delete: %q", a)
	}
	if got, err = r.s.UndeleteSandbox(ctx, tn, sb.ID); err != nil || got.State != "archived" {
		t.Fatalf("undelete: %+v %v, want archived", got, err)
	}
	// The undelete cancels: the count starts again, with a new warning.
	r.at(t0, 5*day+time.Minute)
	got, err = r.s.GetSandbox(ctx, tn, sb.ID)
	if err != nil || got.State != "archived" || got.DeleteAt == nil || !got.DeleteAt.Equal(t0.Add(10*day)) {
		t.Fatalf("after the undelete: %+v %v, want archived until %v", got, err, t0.Add(10*day))
	}
	if n := len(r.warnings(sb.ID)); n != 1 {
		t.Fatalf("%d warnings right after the undelete, want the first alone", n)
	}
}

// FuzzParseRetentionDuration: whatever it is given, the parser returns a
// value in range or errs.ErrInvalid, and what it accepts formats back to
// the same value.
func FuzzParseRetentionDuration(f *testing.F) {
	for _, s := range []string{"", "0", "14d", "36h", "1d12h", "90m", "1.5h", "-1d", "5w", "d", "1d-2h", "36500d", "36501d", "1h2d", "9999999d", "3d0s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseRetentionDuration(s)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("%q: %v, want ErrInvalid", s, err)
			}
			return
		}
		if s == "" {
			if d != nil {
				t.Fatalf("empty: %v", *d)
			}
			return
		}
		if d == nil || *d < 0 || *d > maxRetention {
			t.Fatalf("%q: out of range %v", s, d)
		}
		back, err := ParseRetentionDuration(FormatRetentionDuration(*d))
		if err != nil || *back != *d {
			t.Fatalf("%q = %v formats as %q, which reads %v %v", s, *d, FormatRetentionDuration(*d), back, err)
		}
	})
}

// TestParseRetentionDuration pins the accepted forms.
func TestParseRetentionDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "14d": 14 * day, "36h": 36 * time.Hour, "1d12h": day + 12*time.Hour, "90m": 90 * time.Minute} {
		d, err := ParseRetentionDuration(in)
		if err != nil || *d != want {
			t.Errorf("%q: %v %v, want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"-1d", "-5h", "5w", "d", "1h2d", "1d-2h", "36501d", "x"} {
		if _, err := ParseRetentionDuration(in); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", in, err)
		}
	}
	for d, want := range map[time.Duration]string{0: "0", 14 * day: "14d", day + 12*time.Hour: "1d12h", 90 * time.Minute: "1h30m"} {
		if got := FormatRetentionDuration(d); got != want {
			t.Errorf("format %v: %q, want %q", d, got, want)
		}
	}
}

// TestTenantRetentionOfSessionThreadsAndObservations: a tenant's
// session_keep_within is the retention of the threads made without one
// (a thread's own wins), and its observations_keep_within prunes
// observations older than that at the policy run, each sandbox's newest
// kept; a tenant without the setting keeps everything.
func TestTenantRetentionOfSessionThreadsAndObservations(t *testing.T) {
	r := newRetentionRig(t)
	s := r.s
	ctx := context.Background()
	tn := store.DefaultTenant
	p := api.Principal{TenantID: tn, KeyID: "k1"}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "observer", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.AppendObservation(ctx, p, sb.ID, client.AppendObservationRequest{Kind: "metric", Payload: json.RawMessage(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// No policy: nothing is pruned, however late it is.
	r.clock.mu.Lock()
	r.clock.t = time.Now().Add(365 * day)
	r.clock.mu.Unlock()
	s.PruneObservations(ctx)
	count := func() int {
		page, err := s.ListObservations(ctx, tn, sb.ID, client.ObservationQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Observations)
	}
	if n := count(); n != 3 {
		t.Fatalf("%d observations without a policy, want 3", n)
	}

	if _, err := s.SetRetention(ctx, tn, client.RetentionPolicy{SessionKeepWithin: "7d", ObservationsKeepWithin: "2d"}); err != nil {
		t.Fatal(err)
	}
	th, err := s.CreateThread(ctx, p, sb.ID, client.CreateThreadRequest{Name: "main"})
	if err != nil || th.Retention.KeepWithinSeconds != int64(7*day/time.Second) {
		t.Fatalf("a thread without a retention: %+v %v, want the tenant's 7d", th.Retention, err)
	}
	own, err := s.CreateThread(ctx, p, sb.ID, client.CreateThreadRequest{Name: "own", Retention: client.Retention{KeepLast: 5}})
	if err != nil || own.Retention.KeepLast != 5 || own.Retention.KeepWithinSeconds != 0 {
		t.Fatalf("a thread with its own retention: %+v %v", own.Retention, err)
	}

	// A day on, nothing is 2 days old; three days on, all but the newest.
	r.clock.mu.Lock()
	r.clock.t = time.Now().Add(day)
	r.clock.mu.Unlock()
	s.PruneObservations(ctx)
	if n := count(); n != 3 {
		t.Fatalf("%d observations a day on, want 3", n)
	}
	r.clock.mu.Lock()
	r.clock.t = time.Now().Add(3 * day)
	r.clock.mu.Unlock()
	s.PruneObservations(ctx)
	if n := count(); n != 1 {
		t.Fatalf("%d observations three days on, want the newest only", n)
	}
	if !r.logHas("observations pruned by retention") {
		t.Error("no log line for the pruning")
	}
	got, err := s.GetRetention(ctx, tn)
	if err != nil || got.Effective.SessionKeepWithin != "7d" || got.Effective.ObservationsKeepWithin != "2d" {
		t.Fatalf("effective retention %+v %v", got.Effective, err)
	}
	if _, err := s.SetRetention(ctx, tn, client.RetentionPolicy{ObservationsKeepWithin: "-1d"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("a negative observations_keep_within: %v", err)
	}
}

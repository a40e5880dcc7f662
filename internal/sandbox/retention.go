package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// Retention: per-tenant policies for what the daemon does on its own to
// old sandboxes and volumes (store.RetentionPolicy; unset fields take the
// daemon's defaults).
//
//   - archive_stopped_after (default defaultArchiveAfter, 7d; 0: never) is
//     the default of every sandbox's own backup-policy archive_after: a
//     sandbox that set its own keeps it (RunBackupPolicies). Archiving is
//     not a deletion (the files move to the repository), so it needs no
//     warning; the lifecycle emits sandbox.archived.
//   - delete_archived_after (default never) soft-deletes a sandbox that
//     has been archived that long (counted from its archiving). Its pushes
//     stay in the repository; it then goes through purge_deleted_after. An
//     undelete brings it back archived, its delete_archived_after counted
//     afresh from the undelete.
//   - purge_deleted_after (default Options.DeleteRetention, 30d) purges a
//     sandbox or volume soft-deleted that long, counted from DeletedAt: a
//     policy change applies to what is already deleted (PurgeAt is
//     recomputed). Purging a sandbox deletes its local data and its record;
//     the pushes of an archived (or ever pushed) sandbox stay in the
//     tenant's repository scope, where stead restore still finds them,
//     until they are forgotten or the tenant is deleted (its data key is
//     destroyed). Purging a volume erases its pushes (its data key).
//   - warn_before (default Options.RetentionWarnBefore, 3d): no automatic
//     deletion (the soft-delete of an archived sandbox, the purge of a
//     sandbox or a volume) happens without a warning. From warn_before
//     ahead of the due time, the policy run records a warning (once per
//     subject, action and due time: store.RetentionWarning), emits
//     events.RetentionWarning and logs it. The deletion happens only when
//     it is due AND its warning is at least warn_before old: a daemon that
//     was down over the warning time warns late and acts warn_before after
//     that (PurgeAt shows the postponed time). An undelete or a start in
//     between cancels the deletion: a later one has another due time and
//     gets a new warning.
//   - Every automatic deletion is written to the audit trail before it
//     acts (action retention.delete or retention.purge, outcome naming the
//     due and warning times); if that record cannot be written, nothing is
//     deleted. Its result follows as sandbox.retention_delete,
//     sandbox.purge_expired or volume.purge_expired.

// Retention actions (RetentionWarning.Action, event data "action").
const (
	retentionDelete = "delete"
	retentionPurge  = "purge"
)

// DefaultRetentionWarnBefore is how long before an automatic deletion its
// warning is given when neither the tenant nor the daemon says otherwise.
const DefaultRetentionWarnBefore = 3 * 24 * time.Hour

// maxRetention bounds every retention duration (about 100 years).
const maxRetention = 36500 * 24 * time.Hour

// retention is a tenant's effective policy.
type retention struct {
	archiveAfter        time.Duration // 0: never
	deleteArchivedAfter time.Duration // 0: never
	purgeAfter          time.Duration
	warnBefore          time.Duration
	sessionKeepWithin   time.Duration // 0: none
	observationsWithin  time.Duration // 0: none
}

// retentionDefaults is the daemon's own policy.
func (s *Service) retentionDefaults() retention {
	warn := s.opts.RetentionWarnBefore
	if warn <= 0 {
		warn = DefaultRetentionWarnBefore
	}
	return retention{archiveAfter: defaultArchiveAfter, purgeAfter: s.opts.DeleteRetention, warnBefore: warn}
}

// effective fills p's unset fields with d.
func (d retention) effective(p store.RetentionPolicy) retention {
	r := d
	if p.ArchiveStoppedAfter != nil {
		r.archiveAfter = *p.ArchiveStoppedAfter
	}
	if p.DeleteArchivedAfter != nil {
		r.deleteArchivedAfter = *p.DeleteArchivedAfter
	}
	if p.PurgeDeletedAfter != nil && *p.PurgeDeletedAfter > 0 {
		r.purgeAfter = *p.PurgeDeletedAfter
	}
	if p.WarnBefore != nil {
		r.warnBefore = *p.WarnBefore
	}
	if p.SessionKeepWithin != nil {
		r.sessionKeepWithin = *p.SessionKeepWithin
	}
	if p.ObservationsKeepWithin != nil {
		r.observationsWithin = *p.ObservationsKeepWithin
	}
	return r
}

// retentionOf returns tenant's effective policy. An error other than "no
// policy set" is returned: the caller then deletes nothing.
func (s *Service) retentionOf(ctx context.Context, tenant string) (retention, error) {
	p, err := s.st.GetRetentionPolicy(ctx, tenant)
	if errors.Is(err, errs.ErrNotFound) {
		return s.retentionDefaults(), nil
	}
	if err != nil {
		return retention{}, err
	}
	return s.retentionDefaults().effective(p), nil
}

// purgeAfter is how long tenant's soft-deleted things stay restorable
// (the daemon's default when its policy cannot be read: the policy run
// corrects PurgeAt).
func (s *Service) purgeAfter(ctx context.Context, tenant string) time.Duration {
	r, err := s.retentionOf(ctx, tenant)
	if err != nil {
		return s.opts.DeleteRetention
	}
	return r.purgeAfter
}

// archiveAfterDefault is the archive_after of tenant's sandboxes that set
// none.
func (s *Service) archiveAfterDefault(ctx context.Context, tenant string) (time.Duration, error) {
	r, err := s.retentionOf(ctx, tenant)
	if err != nil {
		return 0, err
	}
	return r.archiveAfter, nil
}

// GetRetention implements api.RetentionBackend.
func (s *Service) GetRetention(ctx context.Context, tenant string) (client.TenantRetention, error) {
	if _, err := s.getTenant(ctx, tenant); err != nil {
		return client.TenantRetention{}, err
	}
	p, err := s.st.GetRetentionPolicy(ctx, tenant)
	if err != nil && !errors.Is(err, errs.ErrNotFound) {
		return client.TenantRetention{}, fmt.Errorf("get retention of tenant %s: %w", tenant, err)
	}
	out := client.TenantRetention{Tenant: tenant, Set: retentionView(p)}
	if err == nil {
		at := p.UpdatedAt
		out.UpdatedAt = &at
	}
	e := s.retentionDefaults().effective(p)
	out.Effective = client.RetentionPolicy{
		ArchiveStoppedAfter:    FormatRetentionDuration(e.archiveAfter),
		DeleteArchivedAfter:    FormatRetentionDuration(e.deleteArchivedAfter),
		PurgeDeletedAfter:      FormatRetentionDuration(e.purgeAfter),
		WarnBefore:             FormatRetentionDuration(e.warnBefore),
		SessionKeepWithin:      FormatRetentionDuration(e.sessionKeepWithin),
		ObservationsKeepWithin: FormatRetentionDuration(e.observationsWithin),
	}
	return out, nil
}

// SetRetention implements api.RetentionBackend: it checks every field
// before it stores anything, then brings the PurgeAt of the tenant's
// soft-deleted sandboxes and volumes in line with the new policy.
func (s *Service) SetRetention(ctx context.Context, tenant string, req client.RetentionPolicy) (client.TenantRetention, error) {
	p := store.RetentionPolicy{TenantID: tenant, UpdatedAt: s.now()}
	for _, f := range []struct {
		name, value string
		dst         **time.Duration
		zeroOK      bool
	}{
		{"archive_stopped_after", req.ArchiveStoppedAfter, &p.ArchiveStoppedAfter, true},
		{"delete_archived_after", req.DeleteArchivedAfter, &p.DeleteArchivedAfter, true},
		{"purge_deleted_after", req.PurgeDeletedAfter, &p.PurgeDeletedAfter, false},
		{"warn_before", req.WarnBefore, &p.WarnBefore, true},
		{"session_keep_within", req.SessionKeepWithin, &p.SessionKeepWithin, true},
		{"observations_keep_within", req.ObservationsKeepWithin, &p.ObservationsKeepWithin, true},
	} {
		d, err := ParseRetentionDuration(f.value)
		if err != nil {
			return client.TenantRetention{}, fmt.Errorf("%s: %w", f.name, err)
		}
		if d != nil && *d == 0 && !f.zeroOK {
			return client.TenantRetention{}, fmt.Errorf("%s 0: soft-deleted sandboxes and volumes are always purged in the end; give a duration like 30d: %w", f.name, errs.ErrInvalid)
		}
		*f.dst = d
	}
	if _, err := s.getTenant(ctx, tenant); err != nil {
		return client.TenantRetention{}, err
	}
	if _, err := s.st.PutRetentionPolicy(ctx, p); err != nil {
		return client.TenantRetention{}, fmt.Errorf("set retention of tenant %s: %w", tenant, err)
	}
	s.log.Info("retention policy set", "tenant", tenant, "archive_stopped_after", req.ArchiveStoppedAfter,
		"delete_archived_after", req.DeleteArchivedAfter, "purge_deleted_after", req.PurgeDeletedAfter, "warn_before", req.WarnBefore)
	s.sweepRetention(ctx, tenant, false)
	return s.GetRetention(ctx, tenant)
}

func retentionView(p store.RetentionPolicy) client.RetentionPolicy {
	f := func(d *time.Duration) string {
		if d == nil {
			return ""
		}
		return FormatRetentionDuration(*d)
	}
	return client.RetentionPolicy{ArchiveStoppedAfter: f(p.ArchiveStoppedAfter), DeleteArchivedAfter: f(p.DeleteArchivedAfter),
		PurgeDeletedAfter: f(p.PurgeDeletedAfter), WarnBefore: f(p.WarnBefore),
		SessionKeepWithin: f(p.SessionKeepWithin), ObservationsKeepWithin: f(p.ObservationsKeepWithin)}
}

// ParseRetentionDuration parses a retention duration: "" is unset (nil),
// "0" is zero, otherwise whole days with a d suffix ("14d"), a Go duration
// ("36h", "90m") or both ("1d12h"). A negative value, an unknown unit and
// anything beyond about 100 years are errs.ErrInvalid.
func ParseRetentionDuration(s string) (*time.Duration, error) {
	if s == "" {
		return nil, nil
	}
	bad := func() (*time.Duration, error) {
		return nil, fmt.Errorf("%q is not a duration like 14d, 36h or 1d12h (0 for never; no negative values, at most 36500d): %w", s, errs.ErrInvalid)
	}
	var d time.Duration
	rest := s
	if days, after, ok := strings.Cut(s, "d"); ok {
		if days == "" || strings.Trim(days, "0123456789") != "" || len(days) > 5 {
			return bad()
		}
		n, err := strconv.Atoi(days)
		if err != nil {
			return bad()
		}
		d, rest = time.Duration(n)*24*time.Hour, after
	}
	if rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return bad()
		}
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 {
			return bad()
		}
		d += r
	}
	if d < 0 || d > maxRetention {
		return bad()
	}
	return &d, nil
}

// FormatRetentionDuration writes d as ParseRetentionDuration reads it:
// "0", or whole days with a d suffix followed by any hours, minutes and
// seconds ("14d", "1d12h", "90m" is "1h30m").
func FormatRetentionDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	var b strings.Builder
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		d -= days * 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
		d -= m * time.Minute
	}
	if d > 0 {
		b.WriteString(d.String())
	}
	return b.String()
}

// archivedAtKey is the spec key of when a sandbox was archived.
const archivedAtKey = "archived_at"

// setArchivedAt records in a sandbox's spec when it was archived.
func setArchivedAt(sb *store.Sandbox, at time.Time) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(sb.Spec, &raw); err != nil {
		return err
	}
	raw[archivedAtKey], _ = json.Marshal(at.UTC())
	b, err := json.Marshal(raw)
	sb.Spec = b
	return err
}

// archivedAt returns when an archived sandbox was archived: the time
// recorded at its archiving, or for one archived before that was recorded
// its last update (no earlier than the archiving).
func archivedAt(sb store.Sandbox) time.Time {
	var v struct {
		At *time.Time `json:"archived_at"`
	}
	if json.Unmarshal(sb.Spec, &v) == nil && v.At != nil {
		return v.At.UTC()
	}
	return sb.UpdatedAt
}

// subject is one thing an automatic deletion may act on.
type subject struct {
	tenant, kind, id, name string
	action                 string    // retentionDelete or retentionPurge
	due                    time.Time // when the policy makes it due
}

// retentionPlan is what the policy run decided for a subject.
type retentionPlan struct {
	warned *store.RetentionWarning // nil: not warned yet
	actAt  time.Time               // the earliest time it may act (zero while not warned)
	act    bool                    // due and warned long enough ago: act now
}

// planRetention applies the warning rule to sj at now: it gives the
// warning (once) when now is within warnBefore of the due time, and says
// whether the deletion may happen now. warn=false only looks.
func (s *Service) planRetention(ctx context.Context, sj subject, warnBefore time.Duration, now time.Time, warn bool) (retentionPlan, error) {
	var plan retentionPlan
	w, err := s.st.GetRetentionWarning(ctx, sj.tenant, sj.kind, sj.id, sj.action, sj.due)
	switch {
	case err == nil:
		plan.warned = &w
	case !errors.Is(err, errs.ErrNotFound):
		return plan, err
	case !warn || now.Before(sj.due.Add(-warnBefore)):
		return plan, nil
	default:
		stored, created, err := s.st.RecordRetentionWarning(ctx, store.RetentionWarning{TenantID: sj.tenant, SubjectKind: sj.kind,
			SubjectID: sj.id, Action: sj.action, DueAt: sj.due, WarnedAt: now})
		if err != nil {
			return plan, err
		}
		plan.warned = &stored
		if created {
			s.announceRetention(ctx, sj, stored, warnBefore)
		}
	}
	plan.actAt = sj.due
	if t := plan.warned.WarnedAt.Add(warnBefore); t.After(plan.actAt) {
		plan.actAt = t
	}
	plan.act = !now.Before(plan.actAt)
	return plan, nil
}

// announceRetention emits the warning's event and log line.
func (s *Service) announceRetention(ctx context.Context, sj subject, w store.RetentionWarning, warnBefore time.Duration) {
	actAt := w.DueAt
	if t := w.WarnedAt.Add(warnBefore); t.After(actAt) {
		actAt = t
	}
	sandbox := ""
	if sj.kind == store.RetentionSandbox {
		sandbox = sj.id
	}
	s.event(ctx, events.RetentionWarning, sj.tenant, sandbox, map[string]string{
		"action": sj.action, "subject_kind": sj.kind, "subject_id": sj.id, "subject_name": sj.name,
		"due_at": w.DueAt.Format(time.RFC3339), "not_before": actAt.Format(time.RFC3339), "warned_at": w.WarnedAt.Format(time.RFC3339),
	})
	s.log.Warn("retention: automatic deletion ahead", "tenant", sj.tenant, "subject", sj.kind, "id", sj.id, "name", sj.name,
		"action", sj.action, "due_at", w.DueAt, "not_before", actAt)
}

// recordRetention writes the audit record of an automatic deletion before
// it acts; an error means it must not act.
func (s *Service) recordRetention(ctx context.Context, sj subject, w store.RetentionWarning) error {
	e := audit.Entry{Actor: "daemon", Tenant: sj.tenant, Action: "retention." + sj.action, Target: sj.id,
		Outcome: fmt.Sprintf("due %s, warned %s", w.DueAt.Format(time.RFC3339), w.WarnedAt.Format(time.RFC3339))}
	if err := s.rec.Record(context.WithoutCancel(ctx), e); err != nil {
		s.log.Error("retention: audit record failed; nothing deleted", "tenant", sj.tenant, "subject", sj.kind, "id", sj.id, "err", err)
		return err
	}
	return nil
}

// PurgeExpired runs the retention policies once (see the comment at the
// top of retention.go): it warns ahead of automatic deletions, purges
// soft-deleted sandboxes and volumes whose retention has ended, and
// soft-deletes sandboxes archived for their tenant's
// delete_archived_after.
func (s *Service) PurgeExpired(ctx context.Context) {
	s.sweepRetention(ctx, "", true)
}

// sweepRetention applies the retention policies of tenant ("" for every
// tenant). With act false it only brings PurgeAt in line with the
// policies (after a policy change) and neither warns nor deletes.
func (s *Service) sweepRetention(ctx context.Context, tenant string, act bool) {
	policies := map[string]*retention{}
	policy := func(t string) *retention {
		if r, ok := policies[t]; ok {
			return r
		}
		r, err := s.retentionOf(ctx, t)
		if err != nil {
			s.log.Error("retention: read policy; nothing deleted", "tenant", t, "err", err)
			policies[t] = nil
			return nil
		}
		policies[t] = &r
		return &r
	}
	list, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant, States: []store.SandboxState{store.StateDeleted, store.StateArchived}})
	if err != nil {
		s.log.Error("retention: list sandboxes", "err", err)
	} else {
		for _, sb := range s.owned(list) {
			if r := policy(sb.TenantID); r != nil {
				s.sandboxRetention(ctx, sb, *r, act)
			}
		}
	}
	vols, err := s.st.ListVolumes(ctx, tenant, true)
	if err != nil {
		s.log.Error("retention: list volumes", "err", err)
		return
	}
	for _, v := range vols {
		if v.State != "deleted" || !s.volumeHere(v) {
			continue
		}
		if r := policy(v.TenantID); r != nil {
			s.volumeRetention(ctx, v, *r, act)
		}
	}
}

// sandboxSubject is the automatic deletion ahead of sb under r, if any.
func sandboxSubject(sb store.Sandbox, r retention) (subject, bool) {
	sj := subject{tenant: sb.TenantID, kind: store.RetentionSandbox, id: sb.ID, name: sb.Name}
	switch sb.State {
	case store.StateDeleted:
		sj.action = retentionPurge
		switch {
		case sb.DeletedAt != nil:
			sj.due = sb.DeletedAt.Add(r.purgeAfter)
		case sb.PurgeAt != nil:
			sj.due = *sb.PurgeAt
		default:
			return sj, false
		}
		return sj, true
	case store.StateArchived:
		if r.deleteArchivedAfter <= 0 {
			return sj, false
		}
		sj.action, sj.due = retentionDelete, archivedAt(sb).Add(r.deleteArchivedAfter)
		return sj, true
	}
	return sj, false
}

// sandboxRetention applies r to one deleted or archived sandbox.
func (s *Service) sandboxRetention(ctx context.Context, sb store.Sandbox, r retention, act bool) {
	sj, ok := sandboxSubject(sb, r)
	if !ok {
		return
	}
	now := s.now()
	plan, err := s.planRetention(ctx, sj, r.warnBefore, now, act)
	if err != nil {
		s.log.Error("retention: warning", "sandbox", sb.ID, "err", err)
		return
	}
	if sj.action == retentionPurge {
		s.showPurgeAt(ctx, sb, sj, plan)
	}
	if !act || !plan.act {
		return
	}
	unlock := s.lock(sb.ID)
	defer unlock()
	// Re-read under the lock: an undelete or a start may have won the
	// race, or the due time moved.
	cur, err := s.st.GetSandbox(ctx, sb.TenantID, sb.ID)
	if err != nil {
		return
	}
	if again, ok := sandboxSubject(cur, r); !ok || again.action != sj.action || !again.due.Equal(sj.due) {
		return
	}
	if err := s.recordRetention(ctx, sj, *plan.warned); err != nil {
		return
	}
	switch sj.action {
	case retentionPurge:
		err := s.purgeLocked(ctx, cur)
		if err != nil {
			s.log.Error("purge expired sandbox", "sandbox", sb.ID, "err", err)
		} else {
			s.st.DeleteRetentionWarnings(ctx, sb.TenantID, store.RetentionSandbox, sb.ID)
		}
		s.record(ctx, sb.TenantID, "sandbox.purge_expired", sb.ID, err)
	case retentionDelete:
		t := s.now()
		purgeAt := t.Add(r.purgeAfter)
		cur.State, cur.DeletedAt, cur.PurgeAt, cur.StopReason = store.StateDeleted, &t, &purgeAt, "retention"
		_, err := s.st.UpdateSandbox(ctx, cur)
		if err != nil {
			s.log.Error("retention: delete archived sandbox", "sandbox", sb.ID, "err", err)
		} else {
			s.log.Info("retention deleted an archived sandbox", "sandbox", sb.ID, "tenant", sb.TenantID, "purge_at", purgeAt)
		}
		s.record(ctx, sb.TenantID, "sandbox.retention_delete", sb.ID, err)
	}
}

// showPurgeAt keeps a deleted sandbox's PurgeAt equal to when the policy
// will purge it: the due time, or once warned the time the warning rule
// allows.
func (s *Service) showPurgeAt(ctx context.Context, sb store.Sandbox, sj subject, plan retentionPlan) {
	want := sj.due
	if plan.warned != nil {
		want = plan.actAt
	}
	if sb.DeletedAt == nil || (sb.PurgeAt != nil && sb.PurgeAt.Equal(want)) {
		return // without DeletedAt, PurgeAt is the due time itself
	}
	unlock := s.lock(sb.ID)
	defer unlock()
	cur, err := s.st.GetSandbox(ctx, sb.TenantID, sb.ID)
	if err != nil || cur.State != store.StateDeleted || !equalTimes(cur.DeletedAt, sb.DeletedAt) {
		return
	}
	cur.PurgeAt = &want
	if _, err := s.st.UpdateSandbox(ctx, cur); err != nil {
		s.log.Warn("retention: update purge time", "sandbox", sb.ID, "err", err)
	}
}

func equalTimes(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

// volumeRetention applies r to one soft-deleted volume.
func (s *Service) volumeRetention(ctx context.Context, v store.Volume, r retention, act bool) {
	sj := subject{tenant: v.TenantID, kind: store.RetentionVolume, id: v.ID, name: v.Name, action: retentionPurge}
	switch {
	case v.DeletedAt != nil:
		sj.due = v.DeletedAt.Add(r.purgeAfter)
	case v.PurgeAt != nil:
		sj.due = *v.PurgeAt
	default:
		return
	}
	plan, err := s.planRetention(ctx, sj, r.warnBefore, s.now(), act)
	if err != nil {
		s.log.Error("retention: warning", "volume", v.ID, "err", err)
		return
	}
	want := sj.due
	if plan.warned != nil {
		want = plan.actAt
	}
	unlock := s.lock(v.ID)
	defer unlock()
	cur, err := s.st.GetVolume(ctx, v.TenantID, v.ID)
	if err != nil || cur.State != "deleted" || !equalTimes(cur.DeletedAt, v.DeletedAt) {
		return // undeleted (or gone) meanwhile
	}
	if cur.DeletedAt != nil && (cur.PurgeAt == nil || !cur.PurgeAt.Equal(want)) { // without DeletedAt, PurgeAt is the due time
		cur.PurgeAt = &want
		if err := s.st.UpdateVolume(ctx, cur); err != nil {
			s.log.Warn("retention: update purge time", "volume", v.ID, "err", err)
		}
	}
	if !act || !plan.act {
		return
	}
	if err := s.recordRetention(ctx, sj, *plan.warned); err != nil {
		return
	}
	err = s.purgeVolume(ctx, cur)
	if err != nil {
		s.log.Error("purge expired volume", "volume", v.ID, "err", err)
	} else {
		s.st.DeleteRetentionWarnings(ctx, v.TenantID, store.RetentionVolume, v.ID)
	}
	s.record(ctx, v.TenantID, "volume.purge_expired", v.ID, err)
}

// retentionDeleteAt is when retention will soft-delete archived sandbox
// sb (nil: never, or sb is not archived), for the sandbox view.
func (s *Service) retentionDeleteAt(ctx context.Context, sb store.Sandbox) *time.Time {
	if sb.State != store.StateArchived {
		return nil
	}
	r, err := s.retentionOf(ctx, sb.TenantID)
	if err != nil {
		return nil
	}
	sj, ok := sandboxSubject(sb, r)
	if !ok {
		return nil
	}
	plan, err := s.planRetention(ctx, sj, r.warnBefore, s.now(), false)
	if err != nil {
		return nil
	}
	at := sj.due
	if plan.warned != nil {
		at = plan.actAt
	}
	return &at
}

// sessionDefault is the retention of a session thread made without one:
// the tenant's session_keep_within (none when unset or unreadable).
func (s *Service) sessionDefault(ctx context.Context, tenant string) store.Retention {
	r, err := s.retentionOf(ctx, tenant)
	if err != nil {
		return store.Retention{}
	}
	return store.Retention{KeepWithin: r.sessionKeepWithin}
}

// PruneObservations applies every tenant's observations_keep_within: its
// observations older than that go, each sandbox's newest kept. The policy
// run calls it.
func (s *Service) PruneObservations(ctx context.Context) {
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		s.log.Warn("observation retention: list tenants", "err", err)
		return
	}
	for _, t := range tenants {
		r, err := s.retentionOf(ctx, t.ID)
		if err != nil || r.observationsWithin <= 0 {
			continue
		}
		n, err := s.st.PruneObservations(ctx, t.ID, s.now().Add(-r.observationsWithin))
		if err != nil {
			s.log.Warn("observation retention", "tenant", t.ID, "err", err)
			continue
		}
		if n > 0 {
			s.log.Info("observations pruned by retention", "tenant", t.ID, "deleted", n, "older_than", FormatRetentionDuration(r.observationsWithin))
		}
	}
}

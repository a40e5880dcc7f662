package store

import (
	"context"
	"time"
)

// RetentionPolicy is a tenant's retention policy. A nil field is unset:
// the daemon's default applies. Durations are whole values the service
// has validated; the store keeps them as given (nanoseconds).
type RetentionPolicy struct {
	TenantID string `json:"tenant_id"`
	// ArchiveStoppedAfter archives a sandbox stopped this long (0: never).
	ArchiveStoppedAfter *time.Duration `json:"archive_stopped_after,omitempty"`
	// DeleteArchivedAfter soft-deletes a sandbox archived this long (0:
	// never).
	DeleteArchivedAfter *time.Duration `json:"delete_archived_after,omitempty"`
	// PurgeDeletedAfter purges a sandbox or volume soft-deleted this long.
	PurgeDeletedAfter *time.Duration `json:"purge_deleted_after,omitempty"`
	// WarnBefore is how long before an automatic deletion its warning is
	// given.
	WarnBefore *time.Duration `json:"warn_before,omitempty"`
	// SessionKeepWithin is the age limit of the session threads made
	// without a retention of their own (0 or nil: none).
	SessionKeepWithin *time.Duration `json:"session_keep_within,omitempty"`
	// ObservationsKeepWithin is the age limit of observations (0 or nil:
	// none); each sandbox's newest observation is always kept.
	ObservationsKeepWithin *time.Duration `json:"observations_keep_within,omitempty"`
	UpdatedAt              time.Time      `json:"updated_at"`
}

// Subjects of a retention warning (RetentionWarning.SubjectKind).
const (
	RetentionSandbox = "sandbox"
	RetentionVolume  = "volume"
)

// RetentionWarning records that the daemon warned a tenant of an automatic
// deletion: what (SubjectKind, SubjectID), which one (Action, e.g.
// "delete" or "purge"), when it was due (DueAt) and when the warning was
// given (WarnedAt).
type RetentionWarning struct {
	TenantID    string    `json:"tenant_id"`
	SubjectKind string    `json:"subject_kind"`
	SubjectID   string    `json:"subject_id"`
	Action      string    `json:"action"`
	DueAt       time.Time `json:"due_at"`
	WarnedAt    time.Time `json:"warned_at"`
}

// RetentionStore holds the tenants' retention policies and the warnings
// given before automatic deletions.
//
// Contract, checked by storetest:
//   - GetRetentionPolicy returns errs.ErrNotFound when the tenant has none
//     stored (an unknown tenant included).
//   - PutRetentionPolicy replaces the tenant's policy as a whole (a nil
//     field is stored as unset) and returns it with UpdatedAt (now when
//     zero). errs.ErrInvalid for an empty tenant or a negative duration,
//     errs.ErrNotFound for an unknown tenant; nothing is stored then.
//   - RecordRetentionWarning stores w unless the tenant already holds a
//     warning of the same (SubjectKind, SubjectID, Action, DueAt); it then
//     keeps the first one. It returns the stored warning and whether this
//     call stored it, so a warning is given once per subject, action and
//     due time. WarnedAt zero is now. errs.ErrInvalid for an empty tenant,
//     subject kind, subject id or action; errs.ErrNotFound for an unknown
//     tenant.
//   - GetRetentionWarning returns that one warning, or errs.ErrNotFound
//     (another tenant's warnings are absent).
//   - ListRetentionWarnings returns the tenant's warnings of one subject
//     (every subject when kind and id are ""), ordered by WarnedAt, then
//     DueAt, then Action.
//   - DeleteRetentionWarnings forgets every warning of one subject of the
//     tenant (none is not an error).
//   - DeleteTenant removes the tenant's policy and warnings with it.
//   - Times are compared and returned to the microsecond or better, UTC.
type RetentionStore interface {
	GetRetentionPolicy(ctx context.Context, tenantID string) (RetentionPolicy, error)
	PutRetentionPolicy(ctx context.Context, p RetentionPolicy) (RetentionPolicy, error)
	RecordRetentionWarning(ctx context.Context, w RetentionWarning) (stored RetentionWarning, created bool, err error)
	GetRetentionWarning(ctx context.Context, tenantID, kind, id, action string, due time.Time) (RetentionWarning, error)
	ListRetentionWarnings(ctx context.Context, tenantID, kind, id string) ([]RetentionWarning, error)
	DeleteRetentionWarnings(ctx context.Context, tenantID, kind, id string) error
}

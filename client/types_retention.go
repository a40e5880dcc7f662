package client

import "time"

// RetentionPolicy is a tenant's retention policy. Each field is a
// duration such as "14d", "36h", "1d12h" or "90m" (days are 24 hours);
// "" leaves the field unset, so the daemon's default applies; "0" means
// never (archive_stopped_after and delete_archived_after only).
type RetentionPolicy struct {
	// ArchiveStoppedAfter archives a sandbox stopped this long (it needs a
	// repository). It is the default of a sandbox's own backup-policy
	// archive_after: a sandbox that sets its own keeps it. Daemon
	// default: 7d.
	ArchiveStoppedAfter string `json:"archive_stopped_after,omitempty" doc:"Archive sandboxes stopped this long (default of each sandbox's archive_after; 0: never)"`
	// DeleteArchivedAfter soft-deletes a sandbox archived this long; it
	// then goes through PurgeDeletedAfter. Daemon default: never.
	DeleteArchivedAfter string `json:"delete_archived_after,omitempty" doc:"Soft-delete sandboxes archived this long (0: never, the default)"`
	// PurgeDeletedAfter purges a sandbox or volume soft-deleted this long
	// (it cannot be 0). Daemon default: its --delete-retention, 30d.
	PurgeDeletedAfter string `json:"purge_deleted_after,omitempty" doc:"Purge sandboxes and volumes soft-deleted this long (default 30d)"`
	// WarnBefore is how long before an automatic deletion (a soft-delete
	// or a purge) the tenant is warned by a retention.warning event.
	// Daemon default: its --retention-warn-before, 3d.
	WarnBefore string `json:"warn_before,omitempty" doc:"Warn (event retention.warning) this long before an automatic deletion (default 3d)"`
	// SessionKeepWithin is the age limit of the session threads made
	// without a retention of their own (their runs older than this are
	// pruned; the newest and the in-doubt are always kept). Daemon
	// default: none.
	SessionKeepWithin string `json:"session_keep_within,omitempty" doc:"Default age limit of session threads made without a retention of their own (0: none, the default)"`
	// ObservationsKeepWithin prunes observations older than this; each
	// sandbox's newest is always kept. Daemon default: none.
	ObservationsKeepWithin string `json:"observations_keep_within,omitempty" doc:"Prune observations older than this, each sandbox's newest kept (0: none, the default)"`
}

// TenantRetention is a tenant's retention policy: the values it set and the
// values that apply.
type TenantRetention struct {
	Tenant string `json:"tenant" doc:"Id of the tenant that owns it"`
	// Set holds the tenant's own values ("" where it set none).
	Set RetentionPolicy `json:"set" doc:"Set holds the tenant's own values (\"\" where it set none)."`
	// Effective holds what applies: Set with the daemon's defaults filled
	// in ("0": never).
	Effective RetentionPolicy `json:"effective" doc:"Effective holds what applies: Set with the daemon's defaults filled in (\"0\": never)."`
	// UpdatedAt is when the policy was last set (absent: never).
	UpdatedAt *time.Time `json:"updated_at,omitempty" doc:"UpdatedAt is when the policy was last set (absent: never)."`
}

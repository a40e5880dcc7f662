package store

import (
	"context"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
)

// AgentStateSandbox resolves the sandbox whose agent state (checkpoints,
// session log, tasks) a caller of tenant addresses, by id or name, and
// returns its id. Another tenant's sandbox, and an empty tenant, are
// errs.ErrNotFound; with write, a soft-deleted sandbox is errs.ErrConflict
// (its state can be read until the purge, not changed). what names the
// state in that message ("checkpoints", "session log").
func AgentStateSandbox(ctx context.Context, st Store, tenant, idOrName string, write bool, what string) (string, error) {
	if tenant == "" {
		// The store reads "" as every tenant; an API caller always has one.
		return "", fmt.Errorf("sandbox %s: no tenant: %w", idOrName, errs.ErrNotFound)
	}
	sb, err := st.GetSandbox(ctx, tenant, idOrName)
	if err != nil {
		return "", err
	}
	if write && sb.State == StateDeleted {
		return "", fmt.Errorf("sandbox %s is deleted; undelete it to change its %s: %w", idOrName, what, errs.ErrConflict)
	}
	return sb.ID, nil
}

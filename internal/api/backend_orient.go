package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// OrientBackend serves the orient call: what a resuming agent must read
// first. NewHandler registers GET /v1/sandboxes/{id}/orient when the
// backend implements it. Everything it shows is the sandbox's own (its
// documents, tasks, runs and files), never another sandbox's; another
// tenant's sandbox is errs.ErrNotFound.
type OrientBackend interface {
	// Orient gathers the sandbox's state, its latest checkpoints, the tails
	// of files (sandbox paths; empty means /workspace/decisions.md and
	// /workspace/plan.md), the latest session run with its in-doubt tool
	// intents and its last events (at most events).
	Orient(ctx context.Context, tenant, id string, files []string, events int) (client.Orient, error)
}

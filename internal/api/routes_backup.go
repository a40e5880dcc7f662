package api

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// OperationRef is the {id} path parameter of the /v1/operations/{id}
// routes (exported only because huma ignores unexported embedded fields).
type OperationRef struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Operation id (op-...)"`
}

// opKeepAlive is how often a silent operation event stream gets a comment
// line.
const opKeepAlive = sseKeepAlive

// repoIntro opens the description of the repository routes.
const repoIntro = "The repository is the daemon's off-box store of pushed snapshots: content-defined chunks, " +
	"deduplicated within a tenant (never across tenants), compressed and encrypted with a data key per tenant, " +
	"on a local directory or an S3-compatible bucket. "

// opIntro is appended to the description of every route that starts an
// operation.
const opIntro = " The work runs in the background as an operation: the answer is the operation, 202 while it " +
	"runs (follow it with GET /v1/operations/{id}/events), or 200 in its final state when the request set " +
	"wait (or the work was already done). A failed operation has state failed and an error."

// opOut is the answer of a route that starts an operation: 202 while it
// runs, 200 once it has ended.
type opOut struct {
	Status int
	Body   client.Operation
}

// opAnswer wraps an operation with the status its state calls for.
func opAnswer(op client.Operation) *opOut {
	status := http.StatusOK
	if op.State == client.OperationRunning {
		status = http.StatusAccepted
	}
	return &opOut{Status: status, Body: op}
}

// isAdmin reports whether p holds an admin key (never a sandbox token).
func isAdmin(p Principal) bool { return p.Admin && p.Sandbox == "" }

// registerBackup adds the off-box backup routes.
func (s *server) registerBackup(b BackupBackend) {
	s.registerRepo(b)
	s.registerOperations(b)
	s.registerPushRestore(b)
	s.registerBackupPolicy(b)
	s.registerDrillArchive(b)
	s.registerFileHistory(b)
	s.registerVolumeBackup(b)
}

// registerVolumeBackup adds hydrate and the volume push, list and restore
// routes.
func (s *server) registerVolumeBackup(b BackupBackend) {
	const tag = "backup"
	hydrate := s.opRoute(http.MethodPost, "/v1/sandboxes/{id}/hydrate", "hydrate-sandbox",
		"Bring an archived sandbox back from the repository", tag,
		"Restores an archived sandbox's root from its archive push; the sandbox is then stopped, ready to start. "+
			"Starting an archived sandbox hydrates it too, without progress; this route reports progress.")
	huma.Register(s.api, hydrate, func(ctx context.Context, in *struct {
		SandboxRef
		Wait bool `query:"wait" doc:"Answer when done instead of at once"`
	}) (*opOut, error) {
		const op = "hydrate sandbox"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		o, err := b.HydrateSandbox(ctx, p.TenantID, in.ID, in.Wait)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	push := s.opRoute(http.MethodPost, "/v1/volumes/{id}/push", "push-volume", "Push a volume to the repository", tag,
		"Pushes an O(1) read-only clone of the volume taken at one instant, incrementally to its latest push, into "+
			"the volume's own key scope (purging the volume destroys that key). The result is a PushResult.")
	huma.Register(s.api, push, func(ctx context.Context, in *struct {
		VolumeRef
		Body *client.PushVolumeRequest
	}) (*opOut, error) {
		const op = "push volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.PushVolumeRequest
		if in.Body != nil {
			req = *in.Body
		}
		o, err := b.PushVolume(ctx, p.TenantID, in.ID, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	list := s.op(http.MethodGet, "/v1/volume-snapshots", "list-volume-pushes", "List pushed volume snapshots", tag, 0)
	list.Description = "Lists the tenant's pushed volume snapshots, of one volume with ?volume= (id, or name while " +
		"it exists). A daemon that only knows the repository finds them too."
	list.Errors = append(list.Errors, http.StatusNotImplemented)
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		Volume string `query:"volume" maxLength:"128" doc:"Only pushes of this volume"`
		PageQuery
	}) (*out[client.Page[client.RemoteSnapshot]], error) {
		const op = "list volume pushes"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		l, err := b.ListVolumePushes(ctx, p.TenantID, in.Volume)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if l == nil {
			l = []client.RemoteSnapshot{}
		}
		return pageOf(l, in.PageQuery)
	})

	snap := s.op(http.MethodPost, "/v1/volumes/{id}/snapshots", "create-volume-snapshot", "Take a local snapshot of a volume", tag, http.StatusCreated)
	snap.Description = "An O(1) read-only clone of the volume taken at one instant (crash-consistent; snapshot a " +
		"sandbox with include_volumes to freeze its writers for that instant). Restore it into a new volume with " +
		"POST /v1/volume-snapshots/restore."
	snap.Errors = append(snap.Errors, http.StatusConflict, http.StatusNotImplemented)
	huma.Register(s.api, snap, func(ctx context.Context, in *struct {
		VolumeRef
		Body *client.CreateSnapshotRequest
	}) (*out[client.Snapshot], error) {
		const op = "snapshot volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.CreateSnapshotRequest
		if in.Body != nil {
			req = *in.Body
		}
		sn, err := b.CreateVolumeSnapshot(ctx, p.TenantID, in.ID, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Snapshot]{Body: sn}, nil
	})

	snaps := s.op(http.MethodGet, "/v1/volumes/{id}/snapshots", "list-volume-snapshots", "List a volume's local snapshots", tag, 0)
	snaps.Errors = append(snaps.Errors, http.StatusNotImplemented)
	huma.Register(s.api, snaps, func(ctx context.Context, in *struct {
		VolumeRef
		PageQuery
	}) (*out[client.Page[client.Snapshot]], error) {
		const op = "list volume snapshots"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		l, err := b.ListVolumeSnapshots(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if l == nil {
			l = []client.Snapshot{}
		}
		return pageOf(l, in.PageQuery)
	})

	restore := s.opRoute(http.MethodPost, "/v1/volume-snapshots/restore", "restore-volume",
		"Restore a pushed volume snapshot into a new volume", tag,
		"Makes a new volume named name from a pushed volume snapshot (or the latest push of volume). The result is "+
			"a VolumeRestoreResult.")
	huma.Register(s.api, restore, func(ctx context.Context, in *struct {
		Body client.RestoreVolumeRequest
	}) (*opOut, error) {
		const op = "restore volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if (in.Body.Snapshot == "") == (in.Body.Volume == "") {
			return nil, s.fail(ctx, op, fmt.Errorf("give exactly one of snapshot or volume: %w", errs.ErrInvalid))
		}
		o, err := b.RestoreVolume(ctx, p.TenantID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})
}

// opRoute returns the shape of a route that starts an operation: 200 or
// 202 with an Operation.
func (s *server) opRoute(method, path, id, summary, tag, desc string) huma.Operation {
	o := s.op(method, path, id, summary, tag, http.StatusOK)
	o.Description = desc + opIntro
	o.Errors = append(o.Errors, http.StatusConflict, http.StatusNotImplemented)
	schema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[client.Operation](), true, "")
	o.Responses = map[string]*huma.Response{
		"202": {
			Description: "The operation was started and is running",
			Content:     map[string]*huma.MediaType{"application/json": {Schema: schema}},
		},
	}
	return o
}

// registerRepo adds /v1/repo, /v1/repo/init, /v1/repo/check and
// /v1/repo/prune.
func (s *server) registerRepo(b BackupBackend) {
	const tag = "repository"

	info := s.op(http.MethodGet, "/v1/repo", "get-repo", "Describe the off-box repository", tag, 0)
	info.Description = repoIntro + "Says whether the daemon has a repository configured and initialised, where it " +
		"is and where its master key file is kept on this host (back it up: without it the repository cannot be " +
		"read). An admin also sees every key scope in the repository."
	info.Errors = append(info.Errors, http.StatusNotImplemented)
	huma.Register(s.api, info, func(ctx context.Context, _ *struct{}) (*out[client.RepoInfo], error) {
		const op = "get repository"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ri, err := b.RepoInfo(ctx, isAdmin(p))
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.RepoInfo]{Body: ri}, nil
	})

	initOp := s.op(http.MethodPost, "/v1/repo/init", "init-repo", "Initialise the off-box repository (admin keys only)", tag, 0)
	initOp.Description = repoIntro + "Creates the repository at the location the daemon was started with and a " +
		"master key for it; 409 if it is already initialised. Admin keys only (403 otherwise)."
	initOp.Errors = append(initOp.Errors, http.StatusForbidden, http.StatusConflict, http.StatusNotImplemented)
	huma.Register(s.api, initOp, func(ctx context.Context, _ *struct{}) (*out[client.RepoInfo], error) {
		const op = "init repository"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if !isAdmin(p) {
			return nil, s.fail(ctx, op, fmt.Errorf(
				"only an admin key may initialise the repository (use the key in %s): %w",
				s.adminKey, errs.ErrForbidden))
		}
		ri, err := b.InitRepo(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.RepoInfo]{Body: ri}, nil
	})

	check := s.opRoute(http.MethodPost, "/v1/repo/check", "check-repo", "Check the repository's structure (and data)", tag,
		repoIntro+"Checks that every snapshot of the caller's tenant (every tenant's for an admin) references only "+
			"index entries and packs that exist; with read_data it also reads the packs (all, or the subset n/m or "+
			"p%) and verifies every chunk against its id. The result (CheckResult) lists errors per scope.")
	huma.Register(s.api, check, func(ctx context.Context, in *struct {
		Body *client.CheckRequest // optional: no body is a structure check
	}) (*opOut, error) {
		const op = "check repository"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.CheckRequest
		if in.Body != nil {
			req = *in.Body
		}
		o, err := b.CheckRepo(ctx, p.TenantID, isAdmin(p), req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	repair := s.opRoute(http.MethodPost, "/v1/repo/repair", "repair-repo", "Repair what a check found damaged", tag,
		repoIntro+"Copies the intact chunks of the packs a check marked damaged into new packs, uploads again "+
			"from the local snapshots this daemon still has what damaged snapshots lack, then deletes the damaged "+
			"packs (the caller's tenant; every tenant's for an admin). The result (RepairResult) lists the "+
			"snapshots repaired and those still damaged.")
	huma.Register(s.api, repair, func(ctx context.Context, in *struct {
		Body *client.RepairRequest // optional
	}) (*opOut, error) {
		const op = "repair repository"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.RepairRequest
		if in.Body != nil {
			req = *in.Body
		}
		o, err := b.RepairRepo(ctx, p.TenantID, isAdmin(p), req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	prune := s.opRoute(http.MethodPost, "/v1/repo/prune", "prune-repo", "Forget pushed snapshots by retention and free their data", tag,
		repoIntro+"Applies retention to the tenant's pushed snapshots (each sandbox's own policy, or the retention "+
			"given, for one sandbox when set), then deletes or repacks the packs nothing references any more. "+
			"With dry_run nothing is deleted and the result says what would be (RepoPruneResult).")
	huma.Register(s.api, prune, func(ctx context.Context, in *struct {
		Body *client.PruneRequest // optional: no body applies every sandbox's policy
	}) (*opOut, error) {
		const op = "prune repository"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.PruneRequest
		if in.Body != nil {
			req = *in.Body
		}
		o, err := b.PruneRepo(ctx, p.TenantID, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})
}

// registerOperations adds GET /v1/operations/{id} and its event stream.
func (s *server) registerOperations(b BackupBackend) {
	const tag = "operations"
	const intro = "An operation is a long task (push, restore, pull, check, repair, prune, drill, archive, hydrate, " +
		"restore-path) the daemon runs in the background; it is kept in the daemon's memory until an hour after " +
		"it ended and is lost on a restart (its effects are not). A sandbox token sees only its own sandbox's. "

	get := s.agentOp(agentScopedByBackend, http.MethodGet, "/v1/operations/{id}", "get-operation", "Describe an operation: state, progress, result", tag, 0)
	get.Description = intro + "State is running, succeeded or failed; progress has the phase, files and bytes " +
		"done of total, and the stored bytes moved; result is kind-specific (PushResult, RestoreResult, " +
		"CheckResult, RepairResult, RepoPruneResult, Drill)."
	huma.Register(s.api, get, func(ctx context.Context, in *OperationRef) (*out[client.Operation], error) {
		const op = "get operation"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		o, err := b.GetOperation(ctx, p, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Operation]{Body: o}, nil
	})

	reg := s.api.OpenAPI().Components.Schemas
	ev := s.agentOp(agentScopedByBackend, http.MethodGet, "/v1/operations/{id}/events", "watch-operation", "Follow an operation as Server-Sent Events", tag, http.StatusOK)
	ev.Description = intro + "A text/event-stream of `event: operation` messages whose data is the Operation as " +
		"JSON: its current state at once, then each change (at most about five a second); the stream closes " +
		"after the message with the final state. Comment lines keep the connection alive."
	ev.Responses = map[string]*huma.Response{
		"200": {
			Description: "A Server-Sent Events stream of Operation states",
			Content: map[string]*huma.MediaType{
				"text/event-stream": {Schema: reg.Schema(reflect.TypeFor[client.Operation](), true, "")},
			},
		},
	}
	huma.Register(s.api, ev, func(ctx context.Context, in *OperationRef) (*huma.StreamResponse, error) {
		const op = "watch operation"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ch, err := b.WatchOperation(ctx, p, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			r, w := humago.Unwrap(hc)
			if err := streamOperation(r.Context(), w, ch); err != nil && r.Context().Err() == nil {
				s.log.Log(r.Context(), logLevelFor(err), "watch operation", "op", in.ID, "tenant", p.TenantID, "err", err)
			}
		}}, nil
	})
}

// streamOperation writes each state from ch as an `operation` event until
// the final one has been sent, ch closes or ctx ends.
func streamOperation(ctx context.Context, w http.ResponseWriter, ch <-chan client.Operation) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	keepAlive := time.NewTicker(opKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case o, ok := <-ch:
			if !ok {
				return nil
			}
			if err := writeSSE(w, rc, "operation", "", o); err != nil {
				return err
			}
			if o.State != client.OperationRunning {
				return nil
			}
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return fmt.Errorf("write keep-alive: %w", err)
			}
			if err := rc.Flush(); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
		}
	}
}

// registerPushRestore adds push, the remote snapshot list, restore and
// pull.
func (s *server) registerPushRestore(b BackupBackend) {
	const tag = "backup"

	push := s.opRoute(http.MethodPost, "/v1/sandboxes/{id}/push", "push-sandbox", "Push a sandbox to the off-box repository", tag,
		"Takes a new local snapshot of the sandbox (frozen only for that instant), or uses the given one, and "+
			"pushes it to the repository incrementally: only files changed since the last push are read and only "+
			"chunks the repository lacks are uploaded. The result (PushResult) names the remote snapshot.")
	huma.Register(s.api, push, func(ctx context.Context, in *struct {
		SandboxRef
		Body *client.PushRequest // optional: no body pushes a new snapshot
	}) (*opOut, error) {
		const op = "push sandbox"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.PushRequest
		if in.Body != nil {
			req = *in.Body
		}
		o, err := b.PushSandbox(ctx, p.TenantID, in.ID, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	list := s.op(http.MethodGet, "/v1/remote-snapshots", "list-remote-snapshots", "List pushed snapshots, oldest first", tag, 0)
	list.Description = "Lists the tenant's snapshots in the off-box repository, of one sandbox with ?sandbox= " +
		"(id or name; a sandbox that no longer exists on this machine can be given by id). Any unique prefix " +
		"of 4 or more hex digits of an id is accepted wherever a remote snapshot is named."
	list.Errors = append(list.Errors, http.StatusNotImplemented)
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		Sandbox string `query:"sandbox" maxLength:"128" doc:"Only snapshots of this sandbox (id or name); empty for all"`
		PageQuery
	}) (*out[client.Page[client.RemoteSnapshot]], error) {
		const op = "list remote snapshots"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		snaps, err := b.ListRemoteSnapshots(ctx, p.TenantID, in.Sandbox)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if snaps == nil {
			snaps = []client.RemoteSnapshot{}
		}
		return pageOf(snaps, in.PageQuery)
	})

	restore := s.opRoute(http.MethodPost, "/v1/remote-snapshots/restore", "restore-remote-snapshot",
		"Restore a pushed snapshot into a new sandbox", tag,
		"Downloads a pushed snapshot (given by id or prefix, or the latest of a sandbox id) into a new sandbox "+
			"with a new id, verifying every chunk, and starts it unless no_start. This works on an empty daemon "+
			"that knows only the repository and its key. The result (RestoreResult) names the new sandbox. "+
			"The pushed sandbox's volume mounts are attached again: to the volume with the recorded id, else to a "+
			"volume restored from that volume's pushes, else to the volume with the recorded name; volumes replaces "+
			"the recorded mount at the same path (or adds one); restore_volumes first restores each volume not found "+
			"here from its push. A recorded volume found nowhere is refused with 409 before anything is downloaded: "+
			"the sandbox's service must not write into an empty mount point.")
	huma.Register(s.api, restore, func(ctx context.Context, in *struct {
		Body client.RestoreRequest
	}) (*opOut, error) {
		const op = "restore remote snapshot"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if (in.Body.Snapshot == "") == (in.Body.Sandbox == "") {
			return nil, s.fail(ctx, op, fmt.Errorf(
				"restore: give either snapshot (a remote snapshot id or prefix) or sandbox (for its latest push): %w", errs.ErrInvalid))
		}
		o, err := b.RestoreRemote(ctx, p.TenantID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	pull := s.opRoute(http.MethodPost, "/v1/remote-snapshots/pull", "pull-remote-snapshot",
		"Copy a pushed snapshot into a new local snapshot", tag,
		"Downloads a pushed snapshot into a new read-only local snapshot, which can then be forked into new "+
			"sandboxes or rolled back to. The result (RestoreResult) names the local snapshot.")
	huma.Register(s.api, pull, func(ctx context.Context, in *struct {
		Body client.PullRequest
	}) (*opOut, error) {
		const op = "pull remote snapshot"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		o, err := b.PullRemote(ctx, p.TenantID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})
}

// registerBackupPolicy adds GET and PUT /v1/sandboxes/{id}/backup-policy.
func (s *server) registerBackupPolicy(b BackupBackend) {
	const tag = "backup"
	const intro = "A sandbox's backup policy: push every interval (the recovery point objective; empty or 0 " +
		"disables scheduled pushes), keep pushed snapshots by retention (keep_last, hourly, daily, weekly, " +
		"monthly, within), and archive the sandbox once it has been stopped for archive_after. "

	get := s.op(http.MethodGet, "/v1/sandboxes/{id}/backup-policy", "get-backup-policy", "Show a sandbox's push schedule and retention", tag, 0)
	get.Description = intro + "The answer also says when the last push was and when the next is due."
	get.Errors = append(get.Errors, http.StatusNotImplemented)
	huma.Register(s.api, get, func(ctx context.Context, in *SandboxRef) (*out[client.BackupPolicy], error) {
		const op = "get backup policy"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		pol, err := b.GetBackupPolicy(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.BackupPolicy]{Body: pol}, nil
	})

	put := s.op(http.MethodPut, "/v1/sandboxes/{id}/backup-policy", "set-backup-policy", "Set a sandbox's push schedule and retention", tag, 0)
	put.Description = intro + "Replaces the whole policy (read it first to change one field); the read-only " +
		"fields are ignored. Durations are Go durations (1h, 72h)."
	put.Errors = append(put.Errors, http.StatusConflict, http.StatusNotImplemented)
	huma.Register(s.api, put, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.BackupPolicy
	}) (*out[client.BackupPolicy], error) {
		const op = "set backup policy"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		pol, err := b.SetBackupPolicy(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.BackupPolicy]{Body: pol}, nil
	})
}

// registerDrillArchive adds the drill routes and archive.
func (s *server) registerDrillArchive(b BackupBackend) {
	const tag = "backup"

	drill := s.opRoute(http.MethodPost, "/v1/sandboxes/{id}/drill", "drill-sandbox", "Run a disaster-recovery drill of a sandbox", tag,
		"Restores the sandbox's latest push into a throw-away sandbox (with empty_data_dir through a second, empty "+
			"daemon data directory that knows only the repository and its key, as after the loss of this machine), "+
			"compares its tree digest with the one recorded at push time and runs the verify command inside it if "+
			"given; the drill is recorded (GET /v1/drills). The result (Drill) has the recovery time and the verdicts.")
	huma.Register(s.api, drill, func(ctx context.Context, in *struct {
		SandboxRef
		Body *client.DrillRequest // optional: no body is a plain drill
	}) (*opOut, error) {
		const op = "drill sandbox"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.DrillRequest
		if in.Body != nil {
			req = *in.Body
		}
		o, err := b.DrillSandbox(ctx, p.TenantID, in.ID, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})

	list := s.op(http.MethodGet, "/v1/drills", "list-drills", "List recorded disaster-recovery drills, newest first", tag, 0)
	list.Description = "Lists the tenant's recorded drills, of one sandbox with ?sandbox=, newest first: when, which " +
		"remote snapshot, whether it passed, the recovery time (restore start to a verified, running sandbox) and " +
		"the digest and verify verdicts."
	list.Errors = append(list.Errors, http.StatusNotImplemented)
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		Sandbox string `query:"sandbox" maxLength:"128" doc:"Only drills of this sandbox (id or name); empty for all"`
		PageQuery
	}) (*out[client.Page[client.Drill]], error) {
		const op = "list drills"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		ds, err := b.ListDrills(ctx, p.TenantID, in.Sandbox)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if ds == nil {
			ds = []client.Drill{}
		}
		return pageOf(ds, in.PageQuery)
	})

	archive := s.opRoute(http.MethodPost, "/v1/sandboxes/{id}/archive", "archive-sandbox",
		"Archive a stopped sandbox: push it, verify the push, free its local disk", tag,
		"Moves a stopped sandbox off this machine: pushes it, verifies the push, then frees its local disk; it "+
			"then costs object storage only. Starting it hydrates it back from the repository. A sandbox in a state "+
			"that forbids it (running, for one) is 409: stop it first.")
	huma.Register(s.api, archive, func(ctx context.Context, in *struct {
		SandboxRef
		Wait bool `query:"wait" doc:"Answer when the archive is done instead of at once"`
	}) (*opOut, error) {
		const op = "archive sandbox"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		o, err := b.ArchiveSandbox(ctx, p.TenantID, in.ID, in.Wait)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})
}

// registerFileHistory adds the history and restore-path routes, which a
// sandbox token may use on its own sandbox (its undo for a file).
func (s *server) registerFileHistory(b BackupBackend) {
	const tag = "backup"

	hist := s.agentOp(agentOwnSandbox, http.MethodGet, "/v1/sandboxes/{id}/history", "file-history", "List the versions of a path across snapshots", tag, 0)
	hist.Description = "Lists the versions of one path found in the sandbox's local snapshots and pushed " +
		"snapshots, newest first, each with its content digest and whether it differs from the next older one. " +
		"Bring one back with restore-path. The sandbox's own token may call this."
	hist.Errors = append(hist.Errors, http.StatusNotImplemented)
	huma.Register(s.api, hist, func(ctx context.Context, in *struct {
		SandboxRef
		Path string `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"Path inside the sandbox, e.g. /workspace/notes.md"`
		PageQuery
	}) (*out[client.Page[client.FileVersion]], error) {
		const op = "file history"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		vs, err := b.FileHistory(ctx, p.TenantID, in.ID, in.Path)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if vs == nil {
			vs = []client.FileVersion{}
		}
		return pageOf(vs, in.PageQuery)
	})

	rp := s.opRoute(http.MethodPost, "/v1/sandboxes/{id}/restore-path", "restore-path",
		"Bring back one file or directory from a snapshot", tag,
		"Copies path from a local snapshot (snap-...) or a pushed snapshot (id or prefix) into the running or "+
			"stopped sandbox, at to (default: path itself, replacing what is there atomically). The sandbox's own "+
			"token may call this and follow the operation.")
	rp = withAgentAccess(rp, agentOwnSandbox)
	huma.Register(s.api, rp, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.RestorePathRequest
	}) (*opOut, error) {
		const op = "restore path"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		o, err := b.RestorePath(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return opAnswer(o), nil
	})
}

package mcp

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stead-dev/stead/client"
)

// registerLifecycle adds sandbox_list, create, start, stop, delete,
// snapshot_list, checkpoint_list and checkpoint_history.
func (t *tools) registerLifecycle(s *sdk.Server) {
	yes, no := true, false
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no}

	sdk.AddTool(s, &sdk.Tool{
		Name:        "sandbox_list",
		Title:       "List sandboxes",
		Description: "Lists the sandboxes this server may act on, with their state (running, paused, stopped, archived ...) and why they last stopped.",
		InputSchema: t.inputSchema(schemaFor[SandboxListInput]()),
		Annotations: ro,
	}, t.sandboxList)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "create",
		Title: "Create a sandbox",
		Description: "Creates a new sandbox (started unless no_start) and returns it. Delete it with delete when done: " +
			"a sandbox keeps its disk until deleted.",
		InputSchema: schemaFor[CreateInput](),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, t.create)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "start",
		Title: "Start or resume a sandbox",
		Description: "Makes a sandbox run: starts a stopped one (its files are as they were; processes start anew " +
			"and /tmp is empty), hydrates an archived one, resumes a paused one (its processes continue). A " +
			"running sandbox is left as it is. Call it when exec says the sandbox is not running.",
		InputSchema: t.inputSchema(schemaFor[SandboxInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, t.start)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "stop",
		Title: "Stop a sandbox",
		Description: "Stops a sandbox: its processes end (the service gets its stop hook first), its files and " +
			"volumes are kept, /tmp is lost. start brings it back.",
		InputSchema: t.inputSchema(schemaFor[SandboxInput]()),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, t.stop)

	delIn := t.inputSchema(schemaFor[DeleteInput]())
	sdk.AddTool(s, &sdk.Tool{
		Name:  "delete",
		Title: "Delete a sandbox",
		Description: "Deletes a sandbox: it stops, and its files, snapshots and state go with it once the daemon's " +
			"undelete window passes (an operator can undelete it until then). To make sure the right one goes, " +
			"confirm must repeat the sandbox's name exactly as sandbox_list shows it.",
		InputSchema: delIn,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false, OpenWorldHint: &no},
	}, t.deleteSandbox)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "snapshot_list",
		Title: "List a sandbox's snapshots",
		Description: "Lists the snapshots of a sandbox, newest first, with their ids (for rollback and fork), labels, " +
			"kinds (user, safety: taken before a rollback, fork, push ...) and times.",
		InputSchema: t.inputSchema(schemaFor[SandboxInput]()),
		Annotations: ro,
	}, t.snapshotList)

	sdk.AddTool(s, &sdk.Tool{
		Name:        "checkpoint_list",
		Title:       "List checkpoint documents",
		Description: "Lists the checkpoint documents of a sandbox (of every agent in it) with their latest version and how many versions are kept.",
		InputSchema: t.inputSchema(schemaFor[SandboxInput]()),
		Annotations: ro,
	}, t.checkpointList)

	sdk.AddTool(s, &sdk.Tool{
		Name:  "checkpoint_history",
		Title: "List the versions of a checkpoint document",
		Description: "Lists the kept versions of a checkpoint document, newest first, with when and by whom each was " +
			"written (with bodies: true, the bodies of the 20 newest). checkpoint_get reads one version.",
		InputSchema: t.inputSchema(schemaFor[CheckpointHistoryInput]()),
		Annotations: ro,
	}, t.checkpointHistory)
}

// SandboxInput is the input of the tools that take only a sandbox.
type SandboxInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
}

// SandboxListInput is the input of sandbox_list.
type SandboxListInput struct {
	All bool `json:"all,omitempty" jsonschema:"Include deleted sandboxes still in their undelete window."`
}

// SandboxOutput describes a sandbox.
type SandboxOutput struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	State        string `json:"state" jsonschema:"creating, running, paused, stopped, deleted, error or archived."`
	Template     string `json:"template,omitempty"`
	InstanceType string `json:"instance_type,omitempty"`
	IdleTimeout  string `json:"idle_timeout,omitempty" jsonschema:"It stops (or pauses) after this long without activity; 0: never."`
	StopReason   string `json:"stop_reason,omitempty" jsonschema:"Why it last stopped (idle, user, crash ...)."`
	CreatedAt    string `json:"created_at"`
	StoppedAt    string `json:"stopped_at,omitempty"`
}

// sandboxOutput converts a Sandbox.
func sandboxOutput(sb client.Sandbox) SandboxOutput {
	out := SandboxOutput{
		ID: sb.ID, Name: sb.Name, State: sb.State, Template: sb.Template, InstanceType: sb.InstanceType,
		IdleTimeout: sb.IdleTimeout, StopReason: sb.StopReason, CreatedAt: rfc3339(sb.CreatedAt),
	}
	if sb.StoppedAt != nil {
		out.StoppedAt = rfc3339(*sb.StoppedAt)
	}
	return out
}

// rfc3339 formats a time for a tool result.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// SandboxListOutput is the result of sandbox_list.
type SandboxListOutput struct {
	Sandboxes []SandboxOutput `json:"sandboxes"`
}

// sandboxList lists sandboxes.
func (t *tools) sandboxList(ctx context.Context, _ *sdk.CallToolRequest, in SandboxListInput) (*sdk.CallToolResult, SandboxListOutput, error) {
	list, err := t.c.ListSandboxes(ctx, in.All)
	if err != nil {
		return nil, SandboxListOutput{}, apiError("list sandboxes", err)
	}
	out := SandboxListOutput{Sandboxes: []SandboxOutput{}}
	for _, sb := range list {
		if t.opts.Confine && !t.isOwn(sb.ID) && !t.isOwn(sb.Name) {
			continue
		}
		out.Sandboxes = append(out.Sandboxes, sandboxOutput(sb))
	}
	return nil, out, nil
}

// CreateInput is the input of create.
type CreateInput struct {
	Name         string            `json:"name,omitempty" jsonschema:"Unique name within the tenant (default: the new id)."`
	Template     string            `json:"template,omitempty" jsonschema:"Template id (default: the daemon's default)."`
	InstanceType string            `json:"instance_type,omitempty" jsonschema:"micro, small (default), medium or large."`
	Env          map[string]string `json:"env,omitempty" jsonschema:"Environment variables of its service and every exec."`
	IdleTimeout  string            `json:"idle_timeout,omitempty" jsonschema:"Stop it after this long without activity, a Go duration (default 15m; 0 disables)."`
	NoStart      bool              `json:"no_start,omitempty" jsonschema:"Create it stopped."`
}

// create creates a sandbox.
func (t *tools) create(ctx context.Context, _ *sdk.CallToolRequest, in CreateInput) (*sdk.CallToolResult, SandboxOutput, error) {
	if t.opts.Confine {
		return nil, SandboxOutput{}, t.confinedError("creating another sandbox")
	}
	if in.IdleTimeout != "" {
		if _, err := time.ParseDuration(in.IdleTimeout); err != nil {
			return nil, SandboxOutput{}, fmt.Errorf("idle_timeout %q is not a Go duration such as 30m or 0", in.IdleTimeout)
		}
	}
	sb, err := t.c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Name: in.Name, Template: in.Template, InstanceType: in.InstanceType, Env: in.Env,
		IdleTimeout: in.IdleTimeout, NoStart: in.NoStart,
	})
	if err != nil {
		return nil, SandboxOutput{}, apiError("create sandbox "+in.Name, err)
	}
	return nil, sandboxOutput(sb), nil
}

// start starts, hydrates or resumes a sandbox, by its state.
func (t *tools) start(ctx context.Context, _ *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	cur, err := t.c.GetSandbox(ctx, sb)
	if err != nil {
		return nil, SandboxOutput{}, apiError("start sandbox "+sb, err)
	}
	switch cur.State {
	case "running":
		return nil, sandboxOutput(cur), nil
	case "paused":
		cur, err = t.c.ResumeSandbox(ctx, sb)
	default:
		cur, err = t.c.StartSandbox(ctx, sb)
	}
	if err != nil {
		return nil, SandboxOutput{}, apiError("start sandbox "+sb, err)
	}
	return nil, sandboxOutput(cur), nil
}

// stop stops a sandbox.
func (t *tools) stop(ctx context.Context, _ *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, SandboxOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	cur, err := t.c.StopSandbox(ctx, sb)
	if err != nil {
		return nil, SandboxOutput{}, apiError("stop sandbox "+sb, err)
	}
	return nil, sandboxOutput(cur), nil
}

// DeleteInput is the input of delete.
type DeleteInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Confirm string `json:"confirm" jsonschema:"The sandbox's name, exactly: nothing is deleted unless it matches."`
}

// deleteSandbox deletes a sandbox once confirm names it.
func (t *tools) deleteSandbox(ctx context.Context, _ *sdk.CallToolRequest, in DeleteInput) (*sdk.CallToolResult, SandboxOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	cur, err := t.c.GetSandbox(ctx, sb)
	if err != nil {
		return nil, SandboxOutput{}, apiError("delete sandbox "+sb, err)
	}
	if in.Confirm != cur.Name {
		return nil, SandboxOutput{}, fmt.Errorf("nothing deleted: confirm must be the sandbox's name %q (got %q)", cur.Name, in.Confirm)
	}
	// By id: the name checked is the sandbox deleted.
	gone, err := t.c.DeleteSandbox(ctx, cur.ID, false)
	if err != nil {
		return nil, SandboxOutput{}, apiError("delete sandbox "+sb, err)
	}
	return nil, sandboxOutput(gone), nil
}

// SnapshotListOutput is the result of snapshot_list.
type SnapshotListOutput struct {
	Snapshots []SnapshotOutput `json:"snapshots"`
}

// SnapshotOutput describes a snapshot.
type SnapshotOutput struct {
	ID          string `json:"id" jsonschema:"Snapshot id (snap-...), for rollback and fork."`
	Label       string `json:"label,omitempty"`
	Description string `json:"description,omitempty"`
	Kind        string `json:"kind" jsonschema:"user, safety (taken before a rollback), fork, push, archive or pull."`
	Parent      string `json:"parent,omitempty" jsonschema:"The snapshot the sandbox came from when this one was taken."`
	CreatedAt   string `json:"created_at"`
}

// snapshotList lists a sandbox's snapshots, newest first.
func (t *tools) snapshotList(ctx context.Context, _ *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, SnapshotListOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, SnapshotListOutput{}, err
	}
	list, err := t.c.SandboxSnapshots(ctx, sb)
	if err != nil {
		return nil, SnapshotListOutput{}, apiError("list snapshots of sandbox "+sb, err)
	}
	out := SnapshotListOutput{Snapshots: make([]SnapshotOutput, 0, len(list))}
	for i := len(list) - 1; i >= 0; i-- {
		s := list[i]
		out.Snapshots = append(out.Snapshots, SnapshotOutput{
			ID: s.ID, Label: s.Label, Description: s.Description, Kind: s.Kind, Parent: s.Parent, CreatedAt: rfc3339(s.CreatedAt),
		})
	}
	return nil, out, nil
}

// CheckpointInfoOutput describes a checkpoint document.
type CheckpointInfoOutput struct {
	Name      string `json:"name"`
	Agent     string `json:"agent,omitempty"`
	Version   int64  `json:"version" jsonschema:"Latest version (0 while only a schema is set)."`
	Versions  int    `json:"versions" jsonschema:"How many versions are kept."`
	Keep      int    `json:"keep" jsonschema:"At most this many versions are kept."`
	HasSchema bool   `json:"has_schema,omitempty" jsonschema:"Every write must pass a JSON Schema."`
	UpdatedAt string `json:"updated_at"`
}

// CheckpointListOutput is the result of checkpoint_list.
type CheckpointListOutput struct {
	Documents []CheckpointInfoOutput `json:"documents"`
}

// checkpointList lists a sandbox's checkpoint documents.
func (t *tools) checkpointList(ctx context.Context, _ *sdk.CallToolRequest, in SandboxInput) (*sdk.CallToolResult, CheckpointListOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, CheckpointListOutput{}, err
	}
	list, err := t.c.ListCheckpoints(ctx, sb)
	if err != nil {
		return nil, CheckpointListOutput{}, apiError("list checkpoints of sandbox "+sb, err)
	}
	out := CheckpointListOutput{Documents: make([]CheckpointInfoOutput, 0, len(list))}
	for _, d := range list {
		out.Documents = append(out.Documents, CheckpointInfoOutput{
			Name: d.Name, Agent: d.Agent, Version: d.Version, Versions: d.Versions, Keep: d.Keep,
			HasSchema: len(d.Schema) > 0, UpdatedAt: rfc3339(d.UpdatedAt),
		})
	}
	return nil, out, nil
}

// CheckpointHistoryInput is the input of checkpoint_history.
type CheckpointHistoryInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Sandbox id or name."`
	Name    string `json:"name" jsonschema:"Document name."`
	Agent   string `json:"agent,omitempty" jsonschema:"Named agent within the sandbox (default: the sandbox's own)."`
	Bodies  bool   `json:"bodies,omitempty" jsonschema:"Include each version's body."`
}

// maxHistoryBodies is how many versions checkpoint_history reads the
// bodies of at most (the newest).
const maxHistoryBodies = 20

// CheckpointHistoryOutput is the result of checkpoint_history.
type CheckpointHistoryOutput struct {
	Versions []CheckpointOutput `json:"versions" jsonschema:"Newest first."`
}

// checkpointHistory lists the versions of a document, newest first.
func (t *tools) checkpointHistory(ctx context.Context, _ *sdk.CallToolRequest, in CheckpointHistoryInput) (*sdk.CallToolResult, CheckpointHistoryOutput, error) {
	sb, err := t.sandbox(in.Sandbox)
	if err != nil {
		return nil, CheckpointHistoryOutput{}, err
	}
	if in.Name == "" {
		return nil, CheckpointHistoryOutput{}, fmt.Errorf("name is missing: pass the document's name (checkpoint_list lists them)")
	}
	list, err := t.c.CheckpointVersions(ctx, sb, in.Agent, in.Name)
	if err != nil {
		return nil, CheckpointHistoryOutput{}, apiError(fmt.Sprintf("list versions of checkpoint %s of sandbox %s", in.Name, sb), err)
	}
	slices.SortFunc(list, func(a, b client.Checkpoint) int { return cmp.Compare(b.Version, a.Version) })
	out := CheckpointHistoryOutput{Versions: make([]CheckpointOutput, 0, len(list))}
	for i, cp := range list {
		if in.Bodies && i < maxHistoryBodies {
			// The list has no bodies: read each version.
			if cp, err = t.c.GetCheckpoint(ctx, sb, in.Agent, in.Name, cp.Version); err != nil {
				return nil, CheckpointHistoryOutput{}, apiError(fmt.Sprintf("get checkpoint %s v%d of sandbox %s", in.Name, cp.Version, sb), err)
			}
		}
		v, err := checkpointOutput(cp)
		if err != nil {
			return nil, CheckpointHistoryOutput{}, err
		}
		out.Versions = append(out.Versions, v)
	}
	return nil, out, nil
}

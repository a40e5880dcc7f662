package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newRestoreCmd is `stead restore`: a pushed snapshot into a new sandbox,
// or one path of a snapshot back into a sandbox.
func newRestoreCmd(g *globals) *cobra.Command {
	var (
		req    client.RestoreRequest
		latest bool
		path   client.RestorePathRequest
		noWait bool
		vols   []string
	)
	cmd := &cobra.Command{
		Use:   "restore (REMOTE_SNAPSHOT | --latest SANDBOX_ID | SANDBOX --path PATH --from SNAPSHOT)",
		Short: "Restore a pushed snapshot into a new sandbox, or one path back into a sandbox",
		Long: `Restore has two modes.

Whole sandbox: download a pushed snapshot into a new sandbox (new id,
started unless --no-start), verifying every chunk. Name the snapshot by id
or a unique prefix (stead remote ls), or give --latest and a sandbox id for
its most recent push. This works on a fresh machine whose daemon knows
only the repository and its key: the sandbox need not exist here.

Volumes: the pushed sandbox's volume mounts come back with it. Each is
attached to the volume here with the recorded id, else to a volume restored
from that volume's pushes (stead volume restore), else to the volume of the
recorded name. --volume NAME[/SUB]:/path[:ro] mounts another volume at a
recorded path (or adds a mount); --restore-volumes first restores each
volume not found here from its push. A recorded volume found nowhere stops
the restore before anything is downloaded (exit 4), saying which volume and
what to do: the sandbox's service must never write into an empty mount
point instead of its volume.

One path: with --path, bring back one file or directory of SANDBOX from a
local snapshot (snap-...) or a pushed one (--from), replacing what is at
the path atomically, or writing it to --to instead. stead history SANDBOX
PATH lists the versions there are.

The work runs in the daemon; stead restore follows it with a progress bar
on stderr. Ctrl-C stops following, not the restore.`,
		Example: `  stead restore 3f9a1c2b
  stead restore 3f9a --name agent-1-copy --no-start
  stead restore --latest sb-0123abcd
  stead restore 3f9a --name agent --restore-volumes          # on a new machine, volumes too
  stead restore 3f9a --volume shared-copy:/data              # mount another volume at /data
  stead restore agent-1 --path /workspace/notes.md --from snap-3f9a
  stead restore agent-1 --path /workspace --from 3f9a1c2b --to /workspace.old`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			pathSet := cmd.Flags().Changed("path")
			if pathSet {
				if latest || req.Name != "" || req.NoStart || len(vols) > 0 || req.RestoreVolumes {
					return usageError{fmt.Errorf("restore --path brings back one path into an existing sandbox: " +
						"--latest, --name, --no-start, --volume and --restore-volumes do not apply")}
				}
				if path.Path == "" || path.Snapshot == "" {
					return usageError{fmt.Errorf("restore --path needs a path and --from SNAPSHOT (see stead history %s PATH)", a[0])}
				}
			} else if path.Snapshot != "" || path.To != "" {
				return usageError{fmt.Errorf("--from and --to go with --path: stead restore SANDBOX --path PATH --from SNAPSHOT")}
			}
			var err error
			if req.Volumes, err = parseVolumes(vols); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if pathSet {
				op, err := c.RestorePath(cmd.Context(), a[0], path)
				if err != nil {
					return fmt.Errorf("restore %s of %s: %w", path.Path, a[0], err)
				}
				return g.finishOperation(cmd, c, "restore "+a[0]+":"+path.Path, op, noWait, func(op client.Operation) error {
					return g.printRestorePathResult(op, a[0], path)
				})
			}
			what := a[0]
			if latest {
				req.Sandbox = a[0]
				what = "the latest push of " + a[0]
			} else {
				req.Snapshot = a[0]
			}
			op, err := c.RestoreRemote(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("restore %s: %w", what, err)
			}
			return g.finishOperation(cmd, c, "restore "+a[0], op, noWait, func(op client.Operation) error {
				return g.printRestoreResultNamed(cmd.Context(), c, op)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&latest, "latest", false, "restore the latest push of the sandbox id given")
	f.StringVar(&req.Name, "name", "", "name of the new sandbox (default: generated)")
	f.BoolVar(&req.NoStart, "no-start", false, "leave the new sandbox stopped")
	f.StringArrayVarP(&vols, "volume", "v", nil, "mount a volume instead of the one recorded at that path (or add one): "+volumeMountSyntax+" (repeatable)")
	f.BoolVar(&req.RestoreVolumes, "restore-volumes", false, "restore the recorded volumes not on this daemon from their pushes first")
	f.StringVar(&path.Path, "path", "", "restore only this path (file or directory) into SANDBOX")
	f.StringVar(&path.Snapshot, "from", "", "with --path: the local (snap-...) or pushed snapshot to take it from")
	f.StringVar(&path.To, "to", "", "with --path: where to put it in the sandbox (default: the path itself)")
	f.BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printRestoreResult prints the sandbox a restore made.
func (g *globals) printRestoreResult(op client.Operation) error {
	return g.printRestoreResultNamed(context.Background(), nil, op)
}

// printRestoreResultNamed is printRestoreResult that names the restored
// sandbox's volumes through c (ids without it).
func (g *globals) printRestoreResultNamed(ctx context.Context, c *client.Client, op client.Operation) error {
	var r client.RestoreResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	into := "a new sandbox"
	if r.Sandbox != nil {
		into = r.Sandbox.ID
		if r.Sandbox.Name != "" && r.Sandbox.Name != r.Sandbox.ID {
			into = r.Sandbox.Name + " (" + r.Sandbox.ID + ")"
		}
		into += ": " + r.Sandbox.State
	}
	if _, err := fmt.Fprintf(g.stdout, "restored %s into %s\nfiles: %d, %s written, %s downloaded in %s\n",
		shortID(op.Target), into, r.Files, bytesOrZero(r.BytesWritten), bytesOrZero(r.BytesDownloaded), seconds(r.Seconds)); err != nil {
		return err
	}
	for _, v := range r.Volumes {
		if _, err := fmt.Fprintf(g.stdout, "restored volume %s\n", volumeLabel(v)); err != nil {
			return err
		}
	}
	if r.Sandbox != nil {
		sb := *r.Sandbox
		if c != nil {
			sb = namedMounts(ctx, c, sb)
		}
		for _, m := range sb.Volumes {
			if _, err := fmt.Fprintf(g.stdout, "volume %s\n", volumeMountStr(m)); err != nil {
				return err
			}
		}
	}
	return nil
}

// printRestorePathResult says where the path was restored and whether it
// replaced what was there.
func (g *globals) printRestorePathResult(op client.Operation, sandbox string, req client.RestorePathRequest) error {
	var r client.RestorePathResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	to := req.To
	if to == "" {
		to = req.Path
	}
	if r.Path != "" {
		to = r.Path
	}
	how := "created"
	if r.Replaced {
		how = "replaced"
	}
	_, err := fmt.Fprintf(g.stdout, "%s of %s restored from %s to %s (%s)\n", req.Path, sandbox, req.Snapshot, to, how)
	return err
}

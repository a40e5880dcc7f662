package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newVolumeAttachCmd is `stead volume attach SANDBOX MOUNT`.
func newVolumeAttachCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "attach SANDBOX " + volumeMountSyntax,
		Short: "Attach a volume to a stopped sandbox (mounted from its next start)",
		Long: `Attach a volume to a sandbox at a mount path, as stead create --volume does at
create. The sandbox must be stopped: its mounts are made when it starts, so
attaching to a running or paused sandbox is refused (exit 4); stop it, attach,
start it. A mount path already in use is refused too (detach it first).`,
		Example: `  stead stop agent-1
  stead volume attach agent-1 shared:/data
  stead volume attach agent-1 shared/agents/a1:/work
  stead volume attach agent-1 refs:/refs:ro
  stead start agent-1`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			m, err := client.ParseVolumeMount(a[1])
			if err != nil {
				return usageError{err}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.AttachVolume(cmd.Context(), a[0], m)
			if err != nil {
				return fmt.Errorf("attach %s to %s: %w", a[1], a[0], err)
			}
			return g.printMounts(cmd.Context(), c, sb)
		},
	}
}

// newVolumeDetachCmd is `stead volume detach SANDBOX PATH`.
func newVolumeDetachCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "detach SANDBOX /mount/path",
		Short: "Detach the volume mounted at a path from a stopped sandbox",
		Long: `Detach the volume mounted at a path from a sandbox, from its next start. The
volume and its data stay. The sandbox must be stopped (exit 4 otherwise); a
path where no volume is mounted is not found (exit 3).`,
		Example: `  stead stop agent-1
  stead volume detach agent-1 /data
  stead start agent-1`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.DetachVolume(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("detach %s from %s: %w", a[1], a[0], err)
			}
			return g.printMounts(cmd.Context(), c, sb)
		},
	}
}

// printMounts prints a sandbox's volume mounts after a change (the
// sandbox as JSON with --json, with volume ids).
func (g *globals) printMounts(ctx context.Context, c *client.Client, sb client.Sandbox) error {
	if g.json {
		return printJSON(g.stdout, sb)
	}
	sb = namedMounts(ctx, c, sb)
	name := sb.Name
	if name == "" {
		name = sb.ID
	}
	if len(sb.Volumes) == 0 {
		_, err := fmt.Fprintf(g.stdout, "%s: no volumes\n", name)
		return err
	}
	for _, m := range sb.Volumes {
		if _, err := fmt.Fprintf(g.stdout, "%s: %s\n", name, volumeMountStr(m)); err != nil {
			return err
		}
	}
	return nil
}

// namedMounts returns sb with each mount's volume id replaced by the
// volume's name where the daemon knows it (for text output; the id stays
// when the lookup fails).
func namedMounts(ctx context.Context, c *client.Client, sb client.Sandbox) client.Sandbox {
	if len(sb.Volumes) == 0 {
		return sb
	}
	vols, err := c.ListVolumes(ctx, true)
	if err != nil {
		return sb
	}
	names := map[string]string{}
	for _, v := range vols {
		names[v.ID] = v.Name
	}
	out := make([]client.VolumeMount, 0, len(sb.Volumes))
	for _, m := range sb.Volumes {
		if n := names[m.Volume]; n != "" {
			m.Volume = n
		}
		out = append(out, m)
	}
	sb.Volumes = out
	return sb
}

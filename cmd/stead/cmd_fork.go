package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// maxForkCount is the most sandboxes one fork makes (the API's limit).
const maxForkCount = 50

// newForkCmd is `stead fork`.
func newForkCmd(g *globals) *cobra.Command {
	var (
		req  client.ForkRequest
		vols []string
	)
	cmd := &cobra.Command{
		Use:   "fork SOURCE",
		Short: "Create new sandboxes with the files of a snapshot or a sandbox",
		Long: `Create --count new sandboxes (new ids), each with an identical, independent
copy of SOURCE's files, and print them. SOURCE is a snapshot id (snap-...)
or a sandbox id or name; a sandbox is snapshotted first (frozen only for an
instant if it is running). On a btrfs pool a fork is O(1) whatever the
size. The new sandboxes are started unless --no-start.

Exits 4 if the sandbox is deleted (undelete it first); nothing is changed.`,
		Example: `  stead fork agent-1                      # one copy of agent-1 as it is now
  stead fork snap-3f9a --count 3          # three variants from hour 4
  stead fork agent-1 --name agent-1-try     # a named copy
  stead fork agent-1 --count 2 --no-start
  stead fork agent-1 --volume scratch-2:/data     # same files, another volume at /data
  stead fork snap-3f9a --json | jq -r '.[].id'`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if req.Count < 1 || req.Count > maxForkCount {
				return usageError{fmt.Errorf("--count %d: want 1 to %d", req.Count, maxForkCount)}
			}
			var err error
			if req.Volumes, err = parseVolumes(vols); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sbs, err := c.Fork(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("fork %s: %w", a[0], err)
			}
			if g.json {
				if sbs == nil {
					sbs = []client.Sandbox{}
				}
				return printJSON(g.stdout, sbs)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "NAME", "STATE", "TEMPLATE", "CREATED")
			for _, sb := range sbs {
				row(tw, sb.ID, sb.Name, sb.State, orDash(sb.Template), ago(sb.CreatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVarP(&req.Count, "count", "n", 1, fmt.Sprintf("how many sandboxes to create (1 to %d)", maxForkCount))
	cmd.Flags().BoolVar(&req.NoStart, "no-start", false, "create them stopped")
	cmd.Flags().StringVar(&req.Name, "name", "", "name of the new sandbox (with --count N: NAME-1 ... NAME-N); default its id")
	cmd.Flags().StringArrayVarP(&vols, "volume", "v", nil, "the forks mount SOURCE's volumes; mount this one instead at its path (or add it): "+volumeMountSyntax+" (repeatable)")
	return cmd
}

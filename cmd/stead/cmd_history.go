package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newHistoryCmd is `stead history SANDBOX PATH`.
func newHistoryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history SANDBOX PATH",
		Short: "List the versions of a file across local and pushed snapshots",
		Long: `History lists the versions of one path found in the sandbox's local
snapshots and pushed snapshots, newest first: when, where (local or
remote), its size, mode and content digest, and whether it differs from
the next older version. Bring one back with
stead restore SANDBOX --path PATH --from SNAPSHOT.`,
		Example: `  stead history agent-1 /workspace/notes.md
  stead history agent-1 /workspace/src --json
  stead restore agent-1 --path /workspace/notes.md --from snap-3f9a`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.FileHistory(cmd.Context(), a[0], a[1])
			if err != nil {
				return fmt.Errorf("history of %s in %s: %w", a[1], a[0], err)
			}
			if g.json {
				if list == nil {
					list = []client.FileVersion{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintf(g.stderr, "%s is in none of %s's snapshots\n", a[1], a[0])
				return nil
			}
			if err := writeFileHistory(g.stdout, list); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "bring one back with: stead restore %s --path %s --from SNAPSHOT\n", a[0], a[1])
			return nil
		},
	}
}

// writeFileHistory prints file versions as an aligned table.
func writeFileHistory(w io.Writer, list []client.FileVersion) error {
	tw := newTable(w)
	row(tw, "TIME", "SOURCE", "SNAPSHOT", "TYPE", "SIZE", "MODE", "CHANGED", "DIGEST")
	for _, v := range list {
		changed := "-"
		if v.Changed {
			changed = "yes"
		}
		snap := v.Snapshot
		if v.Source == "remote" {
			snap = shortID(snap)
		}
		row(tw, v.Time.Local().Format(remoteTimeLayout), v.Source, snap, orDash(v.Type), bytesOrZero(v.Size),
			os.FileMode(v.Mode).Perm().String(), changed, shortDigest(v.Digest))
	}
	return tw.Flush()
}

// shortDigest cuts "sha256:<hex>" to its algorithm and 12 hex digits.
func shortDigest(d string) string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok {
		alg, hex = "", d
	}
	if len(hex) > 12 {
		hex = hex[:12]
	}
	if alg == "" {
		return orDash(hex)
	}
	return alg + ":" + hex
}

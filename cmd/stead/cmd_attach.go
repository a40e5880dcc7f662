package main

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newAttachCmd is `stead attach`.
func newAttachCmd(g *globals) *cobra.Command {
	var quiet, noStdin bool
	cmd := &cobra.Command{
		Use:   "attach SANDBOX",
		Short: "Attach to the agent service: follow its output, type to its stdin (Ctrl-C detaches)",
		Long: `Attach to the sandbox's agent service: its log so far, then new output as it
is written; every line typed is sent to the service's stdin (for example a
command such as /checkpoint). Ctrl-C detaches; the agent keeps running.`,
		Example: `  stead attach agent-1`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rc, err := c.Logs(ctx, a[0], true)
			if err != nil {
				return fmt.Errorf("attach to %s: %w", a[0], err)
			}
			defer func() { _ = rc.Close() }()
			if !quiet {
				fmt.Fprintf(g.stderr, "attached to %s's agent; typed lines go to its stdin; Ctrl-C detaches (the agent keeps running)\n", a[0])
			}
			if !noStdin {
				go forwardLines(ctx, g, c, a[0])
			}
			_, err = io.Copy(g.stdout, rc)
			if ctx.Err() != nil {
				if !quiet {
					fmt.Fprintf(g.stderr, "\ndetached from %s\n", a[0])
				}
				return nil
			}
			if err != nil {
				return fmt.Errorf("attach to %s: %w", a[0], err)
			}
			return fmt.Errorf("attach to %s: the daemon ended the stream (sandbox deleted or daemon restarting)", a[0])
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the agent's output")
	cmd.Flags().BoolVar(&noStdin, "no-stdin", false, "only follow the output; do not send typed lines")
	return cmd
}

// forwardLines sends each line of standard input to the agent's stdin
// until stdin ends or ctx does.
func forwardLines(ctx context.Context, g *globals, c *client.Client, id string) {
	sc := bufio.NewScanner(g.stdin)
	for sc.Scan() {
		if err := c.ServiceInput(ctx, id, sc.Text()+"\n"); err != nil {
			if ctx.Err() != nil {
				return
			}
			fmt.Fprintf(g.stderr, "stead: %v\n", err)
		}
	}
}

package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stead-dev/stead/client"
)

// newLogsCmd is `stead logs`.
func newLogsCmd(g *globals) *cobra.Command {
	var opts client.LogOptions
	cmd := &cobra.Command{
		Use:   "logs SANDBOX",
		Short: "Print the agent service's log",
		Long: `Print the log of the sandbox's supervised agent service. The log is kept
across crashes and stop/start, so it can be read after the agent died.

The log is rotated by size (stead create --log-max-size, --log-keep): logs
prints the kept rotated files, oldest first, then the current one, as one
stream. --since starts at the output written since then, to about a second:
a duration back from now (10m, 2h) or an RFC 3339 time. --follow keeps
printing new output, across rotations, without losing a line.`,
		Example: `  stead logs agent-1
  stead logs -f agent-1             # keep printing new output; Ctrl-C stops
  stead logs --since 10m agent-1
  stead logs --since 2026-12-01T09:00:00Z -f agent-1`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rc, err := c.ReadLogs(ctx, a[0], opts)
			if err != nil {
				return fmt.Errorf("logs of %s: %w", a[0], err)
			}
			defer func() { _ = rc.Close() }()
			if _, err := io.Copy(g.stdout, rc); err != nil && ctx.Err() == nil {
				return fmt.Errorf("logs of %s: %w", a[0], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().StringVar(&opts.Since, "since", "", "only output written since then: a duration back (10m) or an RFC 3339 time")
	return cmd
}

// logRotationFlags are stead create's log rotation flags.
type logRotationFlags struct {
	maxSize string
	keep    int
}

func (f *logRotationFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.maxSize, "log-max-size", "", "rotate the service's log when it would pass this size, e.g. 16MiB (default 64MiB, at least 1MiB)")
	fs.IntVar(&f.keep, "log-keep", 4, "rotated log files kept, compressed (0 to 100)")
}

func (f *logRotationFlags) changed(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("log-max-size") || cmd.Flags().Changed("log-keep")
}

// config is the log rotation the flags ask for, or nil for the daemon's
// default.
func (f *logRotationFlags) config(cmd *cobra.Command) *client.LogConfig {
	if !f.changed(cmd) {
		return nil
	}
	lc := &client.LogConfig{MaxSize: f.maxSize}
	if cmd.Flags().Changed("log-keep") {
		keep := f.keep
		lc.Keep = &keep
	}
	return lc
}

// logRotationStr shows a log rotation.
func logRotationStr(l client.LogConfig) string {
	return fmt.Sprintf("at %s, %d kept (compressed)", l.MaxSize, *l.Keep)
}

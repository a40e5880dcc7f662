package main

import (
	"fmt"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newResizeCmd is `stead resize`.
func newResizeCmd(g *globals) *cobra.Command {
	var (
		req          client.ResizeRequest
		memory, disk string
	)
	cmd := &cobra.Command{
		Use:   "resize SANDBOX",
		Short: "Change the limits of a stopped sandbox",
		Long: `Change the limits of a stopped sandbox: pick an instance type, or set
individual limits (which override the type's).

Exits 4 if the sandbox is running, paused or deleted (stop it first);
nothing is changed.`,
		Example: `  stead stop agent-1
  stead resize agent-1 --type large
  stead resize agent-1 --cpus 2 --memory 4GiB --disk 50GiB
  stead start agent-1`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if memory != "" {
				n, err := humanize.ParseBytes(memory)
				if err != nil {
					return usageError{fmt.Errorf("--memory %q: %w", memory, err)}
				}
				req.MemoryBytes = int64(n)
			}
			if disk != "" {
				n, err := humanize.ParseBytes(disk)
				if err != nil {
					return usageError{fmt.Errorf("--disk %q: %w", disk, err)}
				}
				req.DiskBytes = int64(n)
			}
			if req == (client.ResizeRequest{}) {
				return usageError{fmt.Errorf("resize needs --type or at least one of --cpus, --memory, --pids, --disk")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.ResizeSandbox(cmd.Context(), a[0], req)
			if err != nil {
				return fmt.Errorf("resize %s: %w", a[0], err)
			}
			return g.printSandbox(sb)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.InstanceType, "type", "", "instance type: micro, small, medium, large")
	f.Float64Var(&req.CPUs, "cpus", 0, "CPU quota in cores, e.g. 1.5")
	f.StringVar(&memory, "memory", "", "memory limit, e.g. 2GiB")
	f.Int64Var(&req.Pids, "pids", 0, "process limit")
	f.StringVar(&disk, "disk", "", "disk quota, e.g. 30GiB")
	return cmd
}

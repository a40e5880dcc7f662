package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// quotaHelp explains the quotas, for both verbs.
const quotaHelp = `A tenant's quotas bound what it holds:
  running    sandboxes running or paused at once
  cpus       cpu cores of the running and paused sandboxes together
  memory     their memory together
  disk       disk promised in the pool: disk quotas of live sandboxes
             (not deleted, not archived) plus sizes of live volumes
  volumes    live volumes
  snapshots  local snapshots (of sandboxes and volumes)
  state      bytes of state kept outside the sandboxes: checkpoint versions,
             tasks, observations, key-value values, session events
  repository what the tenant's pushes keep in the repository (a push is
             refused once it is reached)
An operation that would exceed one is refused (HTTP 429) and changes
nothing; the error names the quota, its limit, the usage and the request.
A limit below the usage is accepted: it refuses growth only, and stops or
deletes nothing.`

// newQuotaCmd is `stead quota`: the caller's own tenant's quotas.
func newQuotaCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "quota",
		Aliases: []string{"quotas"},
		Short:   "Show this tenant's quotas with its usage",
		Long:    quotaHelp + "\n\nAny key of the tenant may read them; an admin sets them with stead tenant quota.",
		Example: `  stead quota
  stead quota --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			q, err := c.Quota(cmd.Context())
			if err != nil {
				return fmt.Errorf("get quota: %w", err)
			}
			return printQuotas(g, q)
		},
	}
}

// quotaFlags are the flags of `stead tenant quota`, as given.
type quotaFlags struct {
	running, cpus, memory, disk, volumes, repository, snapshots, state string
}

// newTenantQuotaCmd is `stead tenant quota TENANT [--running N ...]`.
func newTenantQuotaCmd(g *globals) *cobra.Command {
	var fl quotaFlags
	cmd := &cobra.Command{
		Use:   "quota TENANT",
		Short: "Show or set a tenant's quotas (admin)",
		Long: quotaHelp + `

Without flags it shows the tenant's quotas with its usage. Each flag sets
one limit and leaves the others as they are; 0 (or none) removes a limit.
Sizes take binary or decimal units (8GiB, 500GB) or bytes.`,
		Example: `  stead tenant quota acme
  stead tenant quota acme --running 5 --cpus 8 --memory 16GiB
  stead tenant quota acme --disk 100GiB --volumes 10 --repository 50GiB --snapshots 20
  stead tenant quota acme --cpus none`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			req, set, err := fl.request(cmd)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var q client.TenantQuotas
			if set {
				q, err = c.SetTenantQuotas(cmd.Context(), a[0], req)
			} else {
				q, err = c.TenantQuotas(cmd.Context(), a[0])
			}
			if err != nil {
				return fmt.Errorf("quotas of tenant %s: %w", a[0], err)
			}
			return printQuotas(g, q)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.running, "running", "", "sandboxes running or paused at once (0 or none: no limit)")
	f.StringVar(&fl.cpus, "cpus", "", "cpu cores of running and paused sandboxes together, e.g. 4 or 2.5")
	f.StringVar(&fl.memory, "memory", "", "memory of running and paused sandboxes together, e.g. 16GiB")
	f.StringVar(&fl.disk, "disk", "", "disk promised to live sandboxes and volumes, e.g. 100GiB")
	f.StringVar(&fl.volumes, "volumes", "", "live volumes")
	f.StringVar(&fl.repository, "repository", "", "bytes kept in the repository by pushes, e.g. 50GiB")
	f.StringVar(&fl.snapshots, "snapshots", "", "local snapshots")
	f.StringVar(&fl.state, "state", "", "state kept outside the sandboxes (checkpoints, tasks, observations, keys, session events), e.g. 1GiB")
	return cmd
}

// request turns the flags given into a partial update; set is false when
// none was given (a show).
func (fl quotaFlags) request(cmd *cobra.Command) (req client.SetQuotasRequest, set bool, err error) {
	limit := func(name, v string, parse func(string) (int64, error), dst **int64) {
		if err != nil || !cmd.Flags().Changed(name) {
			return
		}
		set = true
		n, e := parse(v)
		if e != nil {
			err = usageError{fmt.Errorf("--%s %q: %v", name, v, e)}
			return
		}
		*dst = &n
	}
	limit("running", fl.running, parseQuotaCount, &req.RunningSandboxes)
	limit("memory", fl.memory, parseQuotaSize, &req.MemoryBytes)
	limit("disk", fl.disk, parseQuotaSize, &req.DiskBytes)
	limit("volumes", fl.volumes, parseQuotaCount, &req.Volumes)
	limit("repository", fl.repository, parseQuotaSize, &req.RepositoryBytes)
	limit("snapshots", fl.snapshots, parseQuotaCount, &req.Snapshots)
	limit("state", fl.state, parseQuotaSize, &req.StateBytes)
	if err == nil && cmd.Flags().Changed("cpus") {
		set = true
		c, e := parseQuotaCPUs(fl.cpus)
		if e != nil {
			return req, set, usageError{fmt.Errorf("--cpus %q: %v", fl.cpus, e)}
		}
		req.CPUs = &c
	}
	return req, set, err
}

// parseQuotaCount reads a count limit: a whole number, or 0, none or
// unlimited for no limit (0).
func parseQuotaCount(v string) (int64, error) {
	if isNone(v) {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a whole number, 0 or none")
	}
	return n, nil
}

// parseQuotaSize reads a size limit (parseSize), or 0, none or unlimited
// for no limit (0).
func parseQuotaSize(v string) (int64, error) {
	if isNone(v) {
		return 0, nil
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, fmt.Errorf("%v (0 or none: no limit)", err)
	}
	return n, nil
}

// parseQuotaCPUs reads a cpus limit: a number of cores, or 0, none or
// unlimited for no limit (0).
func parseQuotaCPUs(v string) (float64, error) {
	if isNone(v) {
		return 0, nil
	}
	c, err := strconv.ParseFloat(v, 64)
	if err != nil || !(c >= 0) || c > 1e6 {
		return 0, fmt.Errorf("want a number of cores such as 4 or 2.5, 0 or none")
	}
	return c, nil
}

// isNone reports whether a flag value removes a limit.
func isNone(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	return v == "0" || v == "none" || v == "unlimited"
}

// printQuotas prints a tenant's quotas: one line per quota, its limit and
// the usage.
func printQuotas(g *globals, q client.TenantQuotas) error {
	if g.json {
		return printJSON(g.stdout, q)
	}
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	size := func(v int64) string { return humanize.IBytes(uint64(max(v, 0))) }
	limit := func(v int64, f func(int64) string) string {
		if v <= 0 {
			return "none"
		}
		return f(v)
	}
	cpus := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	cpuLimit := "none"
	if q.Limits.CPUs > 0 {
		cpuLimit = cpus(q.Limits.CPUs)
	}
	repoUse := size(q.Usage.RepositoryBytes)
	if !q.RepositoryKnown {
		repoUse = "unknown (no repository, or out of reach)"
	}
	tw := newTable(g.stdout)
	fmt.Fprintf(tw, "tenant %s\n", q.Tenant)
	fmt.Fprintln(tw, "QUOTA\tLIMIT\tUSAGE")
	for _, r := range [][3]string{
		{client.QuotaRunningSandboxes, limit(q.Limits.RunningSandboxes, num), num(q.Usage.RunningSandboxes)},
		{client.QuotaCPUs, cpuLimit, cpus(q.Usage.CPUs)},
		{client.QuotaMemoryBytes, limit(q.Limits.MemoryBytes, size), size(q.Usage.MemoryBytes)},
		{client.QuotaDiskBytes, limit(q.Limits.DiskBytes, size), size(q.Usage.DiskBytes)},
		{client.QuotaVolumes, limit(q.Limits.Volumes, num), num(q.Usage.Volumes)},
		{client.QuotaSnapshots, limit(q.Limits.Snapshots, num), num(q.Usage.Snapshots)},
		{client.QuotaRepositoryBytes, limit(q.Limits.RepositoryBytes, size), repoUse},
		{client.QuotaStateBytes, limit(q.Limits.StateBytes, size), size(q.Usage.StateBytes)},
	} {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r[0], r[1], r[2])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(g.stdout, "A limit below the usage refuses growth only; none is no limit.")
	return err
}

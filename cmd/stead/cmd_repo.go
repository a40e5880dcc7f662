package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newRepoCmd is `stead repo` and its subcommands.
func newRepoCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "repo",
		Aliases: []string{"repository"},
		Short:   "Initialise, describe, check and prune the off-box repository",
		Long: `The repository is where stead push puts sandboxes off this machine: a
directory or an S3-compatible bucket the daemon was started with, holding
content-defined chunks, deduplicated within a tenant, compressed and
encrypted with a data key per tenant wrapped by the repository's master
key. Back up the master key file (stead repo info shows where it is):
without it nothing in the repository can be read.`,
		Example: `  stead repo init
  stead repo info
  stead repo check --read-data-subset 1/5
  stead repo repair
  stead repo prune --keep-daily 7 --keep-weekly 4 --dry-run`,
	}
	group(cmd)
	cmd.AddCommand(
		newRepoInitCmd(g),
		newRepoInfoCmd(g),
		newRepoCheckCmd(g),
		newRepoRepairCmd(g),
		newRepoPruneCmd(g),
	)
	return cmd
}

func newRepoInitCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Initialise the repository the daemon was started with (admin key)",
		Long: `Create the repository at the location the daemon was started with, and its
master key. It needs an admin key. Back up the key file it names: without
it nothing in the repository can be read.

A key file that exists already is used, never replaced. On a repository
that is initialised already, init changes nothing (exit 4); if the daemon's
key file is missing, restore your copy of it there (or restart the daemon
with --repo-key-file naming the copy).`,
		Example: "  stead repo init",
		Args:    args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ri, err := c.InitRepo(cmd.Context())
			if err != nil {
				return fmt.Errorf("init repository: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, ri)
			}
			if err := g.printRepoInfo(ri); err != nil {
				return err
			}
			if ri.KeyFile != "" {
				fmt.Fprintf(g.stderr, "Back up %s now: without it the repository cannot be read.\n", ri.KeyFile)
			}
			return nil
		},
	}
}

func newRepoInfoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "info",
		Aliases: []string{"show"},
		Short:   "Describe the repository: location, id, key file",
		Example: `  stead repo info
  stead repo info --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ri, err := c.RepoInfo(cmd.Context())
			if err != nil {
				return fmt.Errorf("get repository: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, ri)
			}
			return g.printRepoInfo(ri)
		},
	}
}

// printRepoInfo prints a repository description as a key/value block.
func (g *globals) printRepoInfo(ri client.RepoInfo) error {
	if !ri.Configured {
		_, err := fmt.Fprintln(g.stdout, "no repository: the daemon was started without one (see stead serve --help)")
		return err
	}
	tw := newTable(g.stdout)
	row(tw, "Location:", orDash(ri.Location))
	row(tw, "Initialized:", yesNo(ri.Initialized))
	if ri.ID != "" {
		row(tw, "ID:", ri.ID)
	}
	if !ri.Created.IsZero() {
		row(tw, "Created:", ri.Created.Local().Format(remoteTimeLayout))
	}
	if ri.KeyFile != "" {
		row(tw, "Key file:", ri.KeyFile+" (back it up)")
	}
	if len(ri.Scopes) > 0 {
		row(tw, "Scopes:", strings.Join(ri.Scopes, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !ri.Initialized {
		fmt.Fprintln(g.stderr, "The repository is not initialised yet: run stead repo init (admin key).")
	}
	return nil
}

// yesNo formats a boolean for people.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newRepoCheckCmd(g *globals) *cobra.Command {
	var req client.CheckRequest
	var noWait bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the repository's structure, and with --read-data its data",
		Long: `Check that every pushed snapshot of your tenant (every tenant's with an admin
key) references only index entries and packs that exist. With --read-data
it also downloads the packs and verifies every chunk against its id; with
--read-data-subset only a part of them (n/m: the n-th of m slices, or p%),
so that m checks in turn read everything.

It names every damaged pack, the pushed snapshots that cannot be restored
completely and the sandbox (or volume) each is of. A pack found damaged is
marked so in the repository: from then on pushes, from this daemon or any
other, upload its data again instead of reusing it. stead repo repair fixes
what the local snapshots can.

The exit code is 1 if anything is wrong.`,
		Example: `  stead repo check
  stead repo check --read-data
  stead repo check --read-data-subset 1/5
  stead repo check --read-data-subset 10%
  stead repo check --read-data --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.ReadDataSubset != "" {
				req.ReadData = true
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.CheckRepo(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("check repository: %w", err)
			}
			return g.finishOperation(cmd, c, "check", op, noWait, g.printCheckResult)
		},
	}
	cmd.Flags().BoolVar(&req.ReadData, "read-data", false, "also read every pack and verify every chunk")
	cmd.Flags().StringVar(&req.ReadDataSubset, "read-data-subset", "", "read only this part of the packs: n/m or p%")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printCheckResult prints a check per scope, then its errors and
// warnings, the damaged packs and the damaged snapshots with their
// sandboxes; a check that found errors is an error (exit 1).
func (g *globals) printCheckResult(op client.Operation) error {
	var r client.CheckResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	tw := newTable(g.stdout)
	row(tw, "SCOPE", "SNAPSHOTS", "PACKS", "BLOBS", "PACKS READ", "ERRORS", "WARNINGS")
	nerr, npacks, nsnaps := 0, 0, 0
	for _, s := range r.Scopes {
		nerr += len(s.Errors)
		npacks += len(s.DamagedPacks)
		nsnaps += len(s.DamagedSnapshots)
		row(tw, s.Scope, strconv.Itoa(s.Snapshots), strconv.Itoa(s.Packs), strconv.Itoa(s.Blobs), strconv.Itoa(s.PacksRead),
			strconv.Itoa(len(s.Errors)), strconv.Itoa(len(s.Warnings)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Scopes {
		for _, e := range s.Errors {
			fmt.Fprintf(g.stdout, "error: %s: %s\n", s.Scope, oneLine(e))
		}
		for _, w := range s.Warnings {
			fmt.Fprintf(g.stdout, "warning: %s: %s\n", s.Scope, oneLine(w))
		}
	}
	if npacks > 0 {
		fmt.Fprintln(g.stdout, "\nDamaged packs:")
		tw = newTable(g.stdout)
		row(tw, "SCOPE", "PACK", "FOUND", "LOST", "REASON")
		for _, s := range r.Scopes {
			for _, p := range s.DamagedPacks {
				lost := strconv.Itoa(p.BlobsLost)
				if p.Missing {
					lost = "all"
				}
				row(tw, s.Scope, p.ID, p.Found.Local().Format(remoteTimeLayout), lost, oneLine(p.Reason))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if nsnaps > 0 {
		fmt.Fprintln(g.stdout, "\nDamaged snapshots:")
		if err := g.printDamagedSnapshots(r.Scopes, func(s client.ScopeCheck) (string, []client.DamagedSnapshot) {
			return s.Scope, s.DamagedSnapshots
		}); err != nil {
			return err
		}
	}
	if !r.OK {
		if npacks > 0 || nsnaps > 0 {
			fmt.Fprintln(g.stdout, "\nPushes upload the damaged packs' data again. Run stead repo repair to fix what local copies can.")
		}
		return fmt.Errorf("repository check found %d error(s)", nerr)
	}
	_, err := fmt.Fprintln(g.stdout, "no errors were found")
	return err
}

// printDamagedSnapshots prints damaged snapshots as a table: snapshot,
// time, sandbox (name and id) or volume, packs, problem.
func (g *globals) printDamagedSnapshots(scopes []client.ScopeCheck, of func(client.ScopeCheck) (string, []client.DamagedSnapshot)) error {
	tw := newTable(g.stdout)
	row(tw, "SCOPE", "SNAPSHOT", "TIME", "SANDBOX", "PACKS", "PROBLEM")
	for _, sc := range scopes {
		name, list := of(sc)
		for _, d := range list {
			row(tw, name, shortID(d.ID), damagedTime(d), damagedOwner(d), damagedPacks(d), oneLine(d.Problem))
		}
	}
	return tw.Flush()
}

func damagedTime(d client.DamagedSnapshot) string {
	if d.Time.IsZero() {
		return "-"
	}
	return d.Time.Local().Format(remoteTimeLayout)
}

// damagedOwner names what a damaged snapshot is of.
func damagedOwner(d client.DamagedSnapshot) string {
	switch {
	case d.Sandbox != "" && d.SandboxName != "" && d.SandboxName != d.Sandbox:
		return d.SandboxName + " (" + d.Sandbox + ")"
	case d.Sandbox != "":
		return d.Sandbox
	case d.Volume != "":
		return "volume " + d.Volume
	}
	return orDash(d.Source)
}

func damagedPacks(d client.DamagedSnapshot) string {
	if len(d.Packs) == 0 {
		return "-"
	}
	ids := make([]string, len(d.Packs))
	for i, p := range d.Packs {
		ids[i] = shortID(p)
	}
	return strings.Join(ids, ",")
}

func newRepoRepairCmd(g *globals) *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Repair what a check found damaged, from the local snapshots this daemon has",
		Long: `Repair fixes the repository after stead repo check --read-data found damaged
packs (restic's repair packs, and the healing of a new backup, in one):

  1. the intact chunks of each damaged pack are copied into new packs;
  2. what damaged snapshots still lack is read again from the local
     snapshots this daemon still has of their sandbox (the one each push
     read first) and uploaded;
  3. the damaged packs are taken out of the index and deleted.

It lists the snapshots it repaired and those still damaged: no local copy
had what they lack. Forget those (stead repo prune, or a new push makes them
unneeded), or restore what is left of them on a daemon that has a copy.
Your tenant's snapshots are repaired; every tenant's with an admin key.

The exit code is 1 if snapshots are still damaged.`,
		Example: `  stead repo check --read-data
  stead repo repair
  stead repo repair --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.RepairRepo(cmd.Context(), client.RepairRequest{})
			if err != nil {
				return fmt.Errorf("repair repository: %w", err)
			}
			return g.finishOperation(cmd, c, "repair", op, noWait, g.printRepairResult)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// printRepairResult prints what a repair did per scope, the snapshots it
// repaired and those still damaged (then an error: exit 1).
func (g *globals) printRepairResult(op client.Operation) error {
	var r client.RepairResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	tw := newTable(g.stdout)
	row(tw, "SCOPE", "PACKS REMOVED", "SALVAGED", "UPLOADED", "REPAIRED", "DAMAGED")
	nrep, ndam := 0, 0
	for _, s := range r.Scopes {
		nrep += len(s.Repaired)
		ndam += len(s.Damaged)
		row(tw, s.Scope, strconv.Itoa(len(s.PacksRemoved)), strconv.FormatInt(s.BlobsSalvaged, 10),
			fmt.Sprintf("%d (%s)", s.BlobsUploaded, bytesOrZero(s.BytesUploaded)), strconv.Itoa(len(s.Repaired)), strconv.Itoa(len(s.Damaged)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Scopes {
		for _, p := range s.PacksRemoved {
			fmt.Fprintf(g.stdout, "removed damaged pack %s (%s)\n", p, s.Scope)
		}
		for _, p := range s.PacksIntact {
			fmt.Fprintf(g.stdout, "pack %s reads back intact: no longer marked damaged (%s)\n", p, s.Scope)
		}
	}
	if nrep > 0 {
		fmt.Fprintln(g.stdout, "\nRepaired snapshots:")
		tw = newTable(g.stdout)
		row(tw, "SCOPE", "SNAPSHOT", "TIME", "SANDBOX", "FROM")
		for _, s := range r.Scopes {
			for _, d := range s.Repaired {
				from := d.RepairedFrom
				if from == "" {
					from = "intact copies (salvaged, or pushed again)"
				}
				row(tw, s.Scope, shortID(d.ID), damagedTime(d), damagedOwner(d), from)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if ndam > 0 {
		fmt.Fprintln(g.stdout, "\nStill damaged (no local copy had what they lack):")
		var scopes []client.ScopeCheck
		for _, s := range r.Scopes {
			scopes = append(scopes, client.ScopeCheck{Scope: s.Scope, DamagedSnapshots: s.Damaged})
		}
		if err := g.printDamagedSnapshots(scopes, func(s client.ScopeCheck) (string, []client.DamagedSnapshot) {
			return s.Scope, s.DamagedSnapshots
		}); err != nil {
			return err
		}
		return fmt.Errorf("%d snapshot(s) are still damaged: forget them, or repair on a daemon that has a local copy", ndam)
	}
	_, err := fmt.Fprintln(g.stdout, "no damaged snapshots are left")
	return err
}

func newRepoPruneCmd(g *globals) *cobra.Command {
	var req client.PruneRequest
	var ret client.BackupRetention
	var noWait bool
	cmd := &cobra.Command{
		Use:     "prune",
		Aliases: []string{"forget"},
		Short:   "Forget pushed snapshots by retention and free the data nothing needs",
		Long: `Prune applies retention to your pushed snapshots, then deletes (or repacks)
the packs no remaining snapshot needs. Without --keep-* flags each
sandbox's own policy applies (stead backup-policy); with them, that retention
applies instead for this run, to --sandbox only when it is given. A
snapshot is kept if any rule keeps it: the last N, the newest per hour,
day, week or month for the last N of those, or any younger than
--keep-within.

--dry-run says what would be forgotten and freed without deleting anything.`,
		Example: `  stead repo prune
  stead repo prune --dry-run
  stead repo prune --sandbox agent-1 --keep-last 3 --keep-daily 7
  stead repo prune --keep-within 72h --keep-monthly 12`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"keep-last", "keep-hourly", "keep-daily", "keep-weekly", "keep-monthly", "keep-within"} {
				if cmd.Flags().Changed(name) {
					req.Retention = &ret
				}
			}
			if err := checkDuration("--keep-within", ret.Within); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.PruneRepo(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("prune repository: %w", err)
			}
			return g.finishOperation(cmd, c, "prune", op, noWait, g.printPruneResult)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Sandbox, "sandbox", "", "forget only this sandbox's snapshots (id or name)")
	addRetentionFlags(cmd, &ret)
	f.BoolVarP(&req.DryRun, "dry-run", "n", false, "say what would be forgotten and freed; delete nothing")
	f.BoolVar(&noWait, "no-wait", false, noWaitUsage)
	return cmd
}

// addRetentionFlags adds the --keep-* flags, bound to r.
func addRetentionFlags(cmd *cobra.Command, r *client.BackupRetention) {
	f := cmd.Flags()
	f.IntVar(&r.KeepLast, "keep-last", 0, "keep the last N snapshots")
	f.IntVar(&r.Hourly, "keep-hourly", 0, "keep the newest snapshot of each of the last N hours that have one")
	f.IntVar(&r.Daily, "keep-daily", 0, "keep the newest snapshot of each of the last N days that have one")
	f.IntVar(&r.Weekly, "keep-weekly", 0, "keep the newest snapshot of each of the last N weeks that have one")
	f.IntVar(&r.Monthly, "keep-monthly", 0, "keep the newest snapshot of each of the last N months that have one")
	f.StringVar(&r.Within, "keep-within", "", "keep every snapshot younger than this (Go duration, e.g. 72h)")
}

// checkDuration refuses a flag value that is not a Go duration (empty is
// fine) as a usage error.
func checkDuration(flag, v string) error {
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return usageError{fmt.Errorf("%s %q: want a Go duration such as 90m, 72h or 0", flag, v)}
	}
	return nil
}

// printPruneResult prints what a prune forgot and freed.
func (g *globals) printPruneResult(op client.Operation) error {
	var r client.RepoPruneResult
	if err := op.DecodeResult(&r); err != nil {
		return err
	}
	verb, forgot := "deleted", "forgot"
	if r.DryRun {
		verb, forgot = "would delete", "would forget"
	}
	ids := make([]string, len(r.Forgotten))
	for i, id := range r.Forgotten {
		ids[i] = shortID(id)
	}
	line := fmt.Sprintf("%s %d snapshot(s)", forgot, len(r.Forgotten))
	if len(ids) > 0 {
		line += ": " + strings.Join(ids, " ")
	}
	_, err := fmt.Fprintf(g.stdout, "%s\n%s %d pack(s), repacked %d, freed %s\n", line, verb, r.PacksDeleted, r.PacksRepacked, bytesOrZero(r.BytesFreed))
	if err == nil && r.DryRun {
		_, err = fmt.Fprintln(g.stdout, "dry run: nothing was deleted")
	}
	return err
}

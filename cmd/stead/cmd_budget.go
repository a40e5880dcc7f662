package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newBudgetCmd is `stead budget` and its subcommands.
func newBudgetCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "budget",
		Aliases: []string{"budgets"},
		Short:   "Cap what the tenant or a sandbox spends per day or month (warn, pause or stop)",
		Long: `A budget caps what the tenant, or one of its sandboxes, spends per UTC day or
UTC calendar month, metered and priced as stead usage shows it. At --warn-at
of the cap (default 0.8) a budget.warning event is given, once per period.
At the cap a budget.exceeded event and an audit record; with --action pause
or stop, the subject's running sandboxes are paused or stopped (stop reason
"budget") within a minute, and starting or resuming them is refused (HTTP
402, naming the budget, the cap and the spend) while the cap stays reached.

Raising the cap above the spend (stead budget set ID --cap MORE), deleting
the budget, or the next period lifts it: nothing else needs clearing.
Managing budgets needs a tenant-admin key; any key of the tenant may list
them.`,
		Example: `  stead budget set --period month --cap 50 --action stop
  stead budget set --sandbox agent-1 --period day --cap 5.00 --action pause --warn-at 0.9
  stead budget ls
  stead budget set bdg-abc123 --cap 10.00     # raise the cap: lifts an exceeded budget
  stead budget rm bdg-abc123`,
	}
	group(cmd)
	cmd.AddCommand(newBudgetSetCmd(g), newBudgetLsCmd(g), newBudgetRmCmd(g))
	return cmd
}

// newBudgetSetCmd is `stead budget set`.
func newBudgetSetCmd(g *globals) *cobra.Command {
	var sandbox, period, capUSD, action string
	var warnAt float64
	cmd := &cobra.Command{
		Use:   "set [ID] [--sandbox SB] --period day|month --cap USD --action warn|pause|stop [--warn-at F]",
		Short: "Create a budget, or change budget ID (only the flags given)",
		Long: `Without ID, create a budget: --period, --cap and --action are required;
without --sandbox it caps the whole tenant. With ID, change that budget:
only the flags given change (the sandbox of a budget never does).
--cap is in US dollars, a decimal with at most 6 decimals.`,
		Example: `  stead budget set --period month --cap 50 --action stop
  stead budget set --sandbox agent-1 --period day --cap 5.00 --action pause
  stead budget set bdg-abc123 --cap 10`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			f := cmd.Flags()
			var req client.UpdateBudgetRequest
			if f.Changed("period") {
				req.Period = &period
			}
			if f.Changed("cap") {
				req.Cap = &capUSD
			}
			if f.Changed("action") {
				req.Action = &action
			}
			if f.Changed("warn-at") {
				req.WarnAt = &warnAt
			}
			if len(a) == 0 && (req.Period == nil || req.Cap == nil || req.Action == nil) {
				return usageError{errors.New("a new budget needs --period (day or month), --cap (US dollars) and --action (warn, pause or stop); to change one, name its ID")}
			}
			if len(a) == 1 && f.Changed("sandbox") {
				return usageError{errors.New("a budget's sandbox never changes: remove the budget and set a new one")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var b client.Budget
			if len(a) == 0 {
				b, err = c.CreateBudget(cmd.Context(), client.CreateBudgetRequest{Sandbox: sandbox, Period: period, Cap: capUSD, Action: action, WarnAt: req.WarnAt})
				if err != nil {
					return fmt.Errorf("set budget: %w", err)
				}
			} else {
				b, err = c.UpdateBudget(cmd.Context(), a[0], req)
				if err != nil {
					return fmt.Errorf("change budget %s: %w", a[0], err)
				}
			}
			if g.json {
				return printJSON(g.stdout, b)
			}
			_, err = fmt.Fprintf(g.stdout, "budget %s: %s per %s on %s, action %s; spent %s this %s (%s)\n",
				b.ID, b.Cap, b.Period, budgetSubject(b), b.Action, b.Spend, b.Period, b.State)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&sandbox, "sandbox", "", "the sandbox (id or name) the budget caps (default: the whole tenant)")
	f.StringVar(&period, "period", "", "day or month (UTC)")
	f.StringVar(&capUSD, "cap", "", "the cap in US dollars, such as 5.00")
	f.StringVar(&action, "action", "", "at the cap: warn, pause or stop the running sandboxes")
	f.Float64Var(&warnAt, "warn-at", client.DefaultBudgetWarnAt, "fraction of the cap at which a budget.warning is given")
	return cmd
}

// budgetSubject names what a budget caps.
func budgetSubject(b client.Budget) string {
	switch {
	case b.Sandbox == "":
		return "tenant " + b.Tenant
	case b.SandboxName != "":
		return "sandbox " + b.SandboxName
	}
	return "sandbox " + b.Sandbox
}

// newBudgetLsCmd is `stead budget ls`.
func newBudgetLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List budgets with their spend, cap and state",
		Example: `  stead budget ls
  stead budget ls --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListBudgets(cmd.Context())
			if err != nil {
				return fmt.Errorf("list budgets: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.Budget{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, "no budgets; set one with: stead budget set --period month --cap 50 --action stop")
				return nil
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "SUBJECT", "PERIOD", "SPEND", "CAP", "USED", "STATE", "ACTION", "RESETS")
			for _, b := range list {
				row(tw, b.ID, budgetSubject(b), b.Period, "$"+b.Spend, "$"+b.Cap, fmt.Sprintf("%.0f%%", b.Fraction*100), b.State, b.Action,
					b.PeriodEnd.UTC().Format("2006-01-02 15:04Z"))
			}
			return tw.Flush()
		},
	}
}

// newBudgetRmCmd is `stead budget rm`.
func newBudgetRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"delete"},
		Short:   "Remove a budget (what it held back may run again)",
		Example: `  stead budget rm bdg-abc123`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteBudget(cmd.Context(), a[0]); err != nil {
				return fmt.Errorf("remove budget %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, map[string]string{"deleted": a[0]})
			}
			_, err = fmt.Fprintf(g.stdout, "budget %s removed\n", a[0])
			return err
		},
	}
}

package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newWebhookCmd is `stead webhook` and its subcommands.
func newWebhookCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "webhook",
		Aliases: []string{"webhooks"},
		Short:   "Send the tenant's events to URLs, signed (add, ls, rm, deliveries, redeliver)",
		Long: `A webhook POSTs each of the tenant's events (see stead events) whose type
matches one of its --type prefixes (all when none is given) to a URL, as
JSON, with these headers:

  Stead-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
  Stead-Event-Id, Stead-Event-Type, Stead-Webhook-Id

The HMAC key is the webhook's secret, shown once by stead webhook add. A
receiver checks the signature over the raw body and refuses old timestamps
(Go: client.VerifyWebhook; Python: stead.verify_webhook).

A 2xx answer is success. Events are delivered in id order and at least
once: a failed attempt (an error, a timeout, any other status) is retried
with exponential backoff, from 1s doubling up to the daemon's
--webhook-max-backoff (5m), with jitter, until it succeeds, and later events
wait for it. A receiver that is down for a while gets every event after it
recovers, in order; an event may come twice (after a daemon crash at the
wrong moment): deduplicate by Stead-Event-Id. Events older than the
daemon's --event-retention (7 days) are dropped, delivered or not.

Every attempt is in the delivery log (stead webhook deliveries); stead
webhook redeliver sends one again. Link-local and cloud metadata addresses
are refused; loopback and the host's own addresses unless the daemon runs
with --webhook-allow-loopback. Redirects are not followed.`,
		Example: `  stead webhook add https://hooks.example.com/stead --type sandbox.stopped --type backup.
  stead webhook ls
  stead webhook deliveries wh-0123abcd
  stead webhook redeliver 42
  stead webhook rm wh-0123abcd`,
	}
	group(cmd)
	cmd.AddCommand(newWebhookAddCmd(g), newWebhookLsCmd(g), newWebhookRmCmd(g), newWebhookDeliveriesCmd(g), newWebhookRedeliverCmd(g))
	return cmd
}

func newWebhookAddCmd(g *globals) *cobra.Command {
	var (
		types  []string
		secret string
		after  int64
	)
	cmd := &cobra.Command{
		Use:   "add URL",
		Short: "Subscribe a URL to the tenant's events; prints the secret once",
		Long: `Subscribe URL to the tenant's events from now on (--after ID: also the stored
events after that id). Without --secret a random secret is generated. The
secret is printed this once: keep it where the receiver can read it.`,
		Example: `  stead webhook add https://hooks.example.com/stead
  stead webhook add http://10.0.0.5:8080/hook --type sandbox. --secret "$(cat hook.secret)"`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			req := client.CreateWebhookRequest{URL: a[0], Types: types, Secret: secret}
			if cmd.Flags().Changed("after") {
				req.After = &after
			}
			w, err := c.CreateWebhook(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("add webhook: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, w)
			}
			fmt.Fprintf(g.stdout, "webhook %s added: %s (%s)\nsecret (shown once): %s\n", w.ID, w.URL, typesStr(w.Types), w.Secret)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&types, "type", nil, "deliver only events whose type starts with this prefix (repeatable; default: every event)")
	f.StringVar(&secret, "secret", "", "the HMAC secret, at least 16 bytes (default: generated)")
	f.Int64Var(&after, "after", 0, "also deliver the stored events with an id above this one")
	return cmd
}

func typesStr(types []string) string {
	if len(types) == 0 {
		return "every event"
	}
	return strings.Join(types, ",")
}

func newWebhookLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the tenant's webhooks and their last attempt",
		Example: `  stead webhook ls`,
		Args:    args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ws, err := c.ListWebhooks(cmd.Context())
			if err != nil {
				return fmt.Errorf("list webhooks: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, ws)
			}
			tw := newTable(g.stdout)
			row(tw, "ID", "URL", "TYPES", "CURSOR", "LAST ATTEMPT", "CREATED")
			for _, w := range ws {
				last := "-"
				if d := w.LastDelivery; d != nil {
					last = fmt.Sprintf("event %d %s %s", d.EventID, deliveryOutcome(*d), ago(d.Time))
				}
				row(tw, w.ID, w.URL, typesStr(w.Types), strconv.FormatInt(w.Cursor, 10), last, ago(w.CreatedAt))
			}
			return tw.Flush()
		},
	}
}

// deliveryOutcome is "ok 200", "failed 503" or "failed: <error>".
func deliveryOutcome(d client.WebhookDelivery) string {
	switch {
	case d.OK:
		return fmt.Sprintf("ok %d", d.StatusCode)
	case d.StatusCode != 0:
		return fmt.Sprintf("failed %d", d.StatusCode)
	default:
		return "failed: " + d.Error
	}
}

func newWebhookRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm WEBHOOK",
		Aliases: []string{"delete"},
		Short:   "Remove a webhook and its delivery log",
		Example: `  stead webhook rm wh-0123abcd`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteWebhook(cmd.Context(), a[0]); err != nil {
				return fmt.Errorf("remove webhook %s: %w", a[0], err)
			}
			if !g.json {
				fmt.Fprintf(g.stdout, "webhook %s removed\n", a[0])
			}
			return nil
		},
	}
}

func newWebhookDeliveriesCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:     "deliveries WEBHOOK",
		Short:   "Show a webhook's delivery attempts, newest first",
		Example: `  stead webhook deliveries wh-0123abcd --limit 20`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ds, err := c.ListWebhookDeliveries(cmd.Context(), a[0], limit)
			if err != nil {
				return fmt.Errorf("list deliveries of webhook %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, ds)
			}
			tw := newTable(g.stdout)
			row(tw, "DELIVERY", "EVENT", "TYPE", "ATTEMPT", "OUTCOME", "DURATION", "WHEN")
			for _, d := range ds {
				attempt := strconv.Itoa(d.Attempt)
				if d.Redelivery {
					attempt = "redelivery"
				}
				row(tw, strconv.FormatInt(d.ID, 10), strconv.FormatInt(d.EventID, 10), d.EventType, attempt, deliveryOutcome(d),
					fmt.Sprintf("%.1fms", d.DurationMS), ago(d.Time))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many attempts")
	return cmd
}

func newWebhookRedeliverCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "redeliver DELIVERY",
		Short: "Send a past delivery's event to its webhook again, now",
		Long: `Send the event of delivery DELIVERY (an id from stead webhook deliveries) to
its webhook once more, now, and show the outcome. The webhook's ordered
stream is not affected. Exits 1 when the receiver did not answer 2xx.`,
		Example: `  stead webhook redeliver 42`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := strconv.ParseInt(a[0], 10, 64)
			if err != nil || id <= 0 {
				return usageError{fmt.Errorf("delivery %q: want a delivery id (a number, from stead webhook deliveries)", a[0])}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			d, err := c.RedeliverWebhook(cmd.Context(), id)
			if err != nil {
				return fmt.Errorf("redeliver %d: %w", id, err)
			}
			if g.json {
				if err := printJSON(g.stdout, d); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(g.stdout, "event %d to webhook %s: %s (delivery %d, %.1fms)\n", d.EventID, d.Webhook, deliveryOutcome(d), d.ID, d.DurationMS)
			}
			if !d.OK {
				return fmt.Errorf("redeliver %d: the receiver did not accept it: %s", id, deliveryOutcome(d))
			}
			return nil
		},
	}
}

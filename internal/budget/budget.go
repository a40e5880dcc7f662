// Package budget enforces spend caps. A budget (store.Budget) caps what a
// tenant, or one of its sandboxes, spends per UTC day or UTC calendar
// month, as the meter prices it (metering.Meter.Report: running time by
// instance type, memory, storage). The Enforcer checks every budget at
// every tick (DefaultInterval, so a crossing is acted on within a minute):
//
//   - at WarnAt x cap it emits events.BudgetWarning, once per period (and
//     cap);
//   - at the cap it records the crossing, emits events.BudgetExceeded and
//     writes a budget.exceeded audit record, once per crossing (period and
//     cap); with action pause or stop it pauses or stops every running
//     sandbox of the subject (stop reason "budget"), with a budget.pause or
//     budget.stop audit record each. A sandbox found running under an
//     exceeded budget at a later tick is paused or stopped then.
//   - while the cap stays reached, MayRun refuses to start or resume a
//     sandbox of the subject with errs.ErrBudget (HTTP 402), naming the
//     budget, the cap and the spend. It computes the spend afresh, so
//     raising the cap above it, deleting the budget or a new period lifts
//     the refusal at once: no state is cleared by hand.
//
// In a cluster the checks run once per cluster: Options.Leader says
// whether this node runs them now (the node holding the budget job lease,
// cluster.Job), and the actions reach the node that holds each sandbox
// (Options.Sandboxes relays them: cluster.Router.RelayBudget). MayRun and
// the budget API work on every node.
//
// Crash ordering. A crossing (or a warning) is written to the budget's
// state before its event and audit record: a crash between the two loses
// that event, never reports it twice; the action on the sandboxes does not
// depend on the record (it is re-applied at every tick while the cap is
// reached), so a crash never lets a sandbox run on past its budget.
package budget

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// DefaultInterval is the enforcer's default tick: a crossing is acted on
// within a minute (a tick, plus the meter's view of the running time,
// which counts open intervals up to now).
const DefaultInterval = 30 * time.Second

// StopReason is the stop reason of a sandbox a budget paused or stopped.
const StopReason = "budget"

// Spender prices what a tenant, or one of its sandboxes, used over a
// period: metering.Meter.
type Spender interface {
	Report(ctx context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error)
}

// Sandboxes is what the enforcer acts through: the sandbox service.
type Sandboxes interface {
	// BudgetPause pauses the tenant's running sandbox id with stop reason
	// StopReason. acted is false (and err nil) when it was not running
	// (paused, stopped or gone meanwhile): nothing was done.
	BudgetPause(ctx context.Context, tenant, id string) (acted bool, err error)
	// BudgetStop stops it likewise.
	BudgetStop(ctx context.Context, tenant, id string) (acted bool, err error)
}

// Options configure an Enforcer.
type Options struct {
	// Store keeps the budgets and is read for sandboxes.
	Store store.Store
	// Spend prices usage (the meter).
	Spend Spender
	// Sandboxes pauses and stops sandboxes (nil: actions are recorded,
	// not applied — tools and tests only).
	Sandboxes Sandboxes
	// Events hears budget.warning and budget.exceeded (nil: nobody).
	Events events.Sink
	// Audit records crossings and actions (nil: nothing recorded).
	Audit audit.Recorder
	// Interval is the tick (default DefaultInterval).
	Interval time.Duration
	// Leader, when set (a cluster), is asked before each of Run's ticks
	// whether this node checks the budgets now; it returns ctx carrying
	// the fence the enforcer's own store writes (a budget's state) are
	// made under. Nil: this node always checks (one node).
	Leader func(ctx context.Context) (fenced context.Context, ok bool)
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Enforcer checks budgets, acts on crossings and gates starts. It serves
// the budget API (api.BudgetBackend) too.
type Enforcer struct {
	st   store.Store
	opts Options
	log  *slog.Logger
	// tickMu keeps ticks apart. MayRun never takes it: a start holds its
	// sandbox's lock while it asks, and a tick may wait for that lock.
	tickMu sync.Mutex
}

// New returns an enforcer.
func New(opts Options) *Enforcer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Audit == nil {
		opts.Audit = audit.Nop{}
	}
	return &Enforcer{st: opts.Store, opts: opts, log: opts.Logger}
}

func (e *Enforcer) now() time.Time { return e.opts.Now().UTC() }

// Interval is the enforcer's tick.
func (e *Enforcer) Interval() time.Duration { return e.opts.Interval }

// period returns the current period of kind p at now: [start, end) and its
// key ("2026-12-02" for a day, "2026-12" for a month).
func period(p string, now time.Time) (start, end time.Time, key string) {
	now = now.UTC()
	if p == store.BudgetDay {
		start = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1), start.Format(time.DateOnly)
	}
	start = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0), start.Format("2006-01")
}

// measure is a budget's spend in its current period.
type measure struct {
	spend      int64 // micro-dollars
	start, end time.Time
	key        string
}

func (m measure) exceeded(b store.Budget) bool { return m.spend >= b.CapMicros }

func (m measure) warned(b store.Budget) bool {
	return float64(m.spend) >= b.WarnAt*float64(b.CapMicros)
}

// measure prices b's subject from the start of its period to now.
func (e *Enforcer) measure(ctx context.Context, b store.Budget, now time.Time) (measure, error) {
	start, end, key := period(b.Period, now)
	m := measure{start: start, end: end, key: key}
	if !start.Before(now) {
		return m, nil
	}
	rep, err := e.opts.Spend.Report(ctx, b.TenantID, client.UsageQuery{Since: start, Until: now, Sandbox: b.SandboxID})
	if err != nil {
		return m, fmt.Errorf("spend of budget %s: %w", b.ID, err)
	}
	m.spend = dollarsToMicros(rep.Total.Cost)
	return m, nil
}

// Run ticks every Interval until ctx ends; with a Leader, only the ticks
// it leads.
func (e *Enforcer) Run(ctx context.Context) {
	t := time.NewTicker(e.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wctx := ctx
			if e.opts.Leader != nil {
				var ok bool
				if wctx, ok = e.opts.Leader(ctx); !ok {
					continue
				}
			}
			if err := e.tick(ctx, wctx); err != nil && ctx.Err() == nil {
				e.log.Error("budget tick", "err", err)
			}
		}
	}
}

// Tick checks every budget once (see the package comment). A budget whose
// check fails is logged and skipped; the others are checked all the same.
func (e *Enforcer) Tick(ctx context.Context) error { return e.tick(ctx, ctx) }

// tick is Tick with the budgets' state written under wctx (a leader's
// fence).
func (e *Enforcer) tick(ctx, wctx context.Context) error {
	e.tickMu.Lock()
	defer e.tickMu.Unlock()
	list, err := e.st.ListBudgets(ctx, "")
	if err != nil {
		return fmt.Errorf("budget tick: %w", err)
	}
	var errList []error
	for _, b := range list {
		if err := e.check(ctx, wctx, b); err != nil {
			e.log.Error("budget check", "budget", b.ID, "tenant", b.TenantID, "err", err)
			errList = append(errList, err)
		}
	}
	return errors.Join(errList...)
}

// numbers describes a budget's spend for events, audit records and errors.
func numbers(b store.Budget, m measure) map[string]string {
	d := map[string]string{
		"budget": b.ID, "period": b.Period, "period_key": m.key, "cap": FormatUSD(b.CapMicros), "spend": FormatUSD(m.spend),
		"fraction": fmt.Sprintf("%.4f", float64(m.spend)/float64(b.CapMicros)), "action": b.Action, "currency": "USD",
	}
	if b.SandboxID != "" {
		d["sandbox"] = b.SandboxID
	}
	return d
}

func (e *Enforcer) check(ctx, wctx context.Context, b store.Budget) error {
	now := e.now()
	m, err := e.measure(ctx, b, now)
	if err != nil {
		return err
	}
	st := b.State
	newWarning := m.warned(b) && !(st.WarnedPeriod == m.key && st.WarnedCapMicros == b.CapMicros)
	newCrossing := m.exceeded(b) && !(st.ExceededPeriod == m.key && st.ExceededCapMicros == b.CapMicros)
	if newWarning {
		st.WarnedPeriod, st.WarnedAt, st.WarnedSpendMicros, st.WarnedCapMicros = m.key, &now, m.spend, b.CapMicros
	}
	if newCrossing {
		st.ExceededPeriod, st.ExceededAt, st.ExceededSpendMicros, st.ExceededCapMicros = m.key, &now, m.spend, b.CapMicros
	}
	if newWarning || newCrossing {
		if err := e.st.SetBudgetState(wctx, b.TenantID, b.ID, st); err != nil {
			return fmt.Errorf("record the state of budget %s: %w", b.ID, err)
		}
	}
	data := numbers(b, m)
	if newWarning {
		e.log.Info("budget warning", "budget", b.ID, "tenant", b.TenantID, "spend", data["spend"], "cap", data["cap"])
		e.emit(ctx, events.BudgetWarning, b, data)
	}
	if !m.exceeded(b) {
		return nil
	}
	if newCrossing {
		e.log.Warn("budget exceeded", "budget", b.ID, "tenant", b.TenantID, "sandbox", b.SandboxID, "spend", data["spend"], "cap", data["cap"], "action", b.Action)
		e.emit(ctx, events.BudgetExceeded, b, data)
		e.record(ctx, b.TenantID, "budget.exceeded", b.ID, fmt.Sprintf("ok (spend %s USD reached the cap %s USD of %s per %s, %s; action %s)",
			data["spend"], data["cap"], subject(b), b.Period, m.key, b.Action))
	}
	if b.Action == store.BudgetWarn {
		return nil
	}
	return e.act(ctx, b, data)
}

// subject names what a budget caps.
func subject(b store.Budget) string {
	if b.SandboxID == "" {
		return "tenant " + b.TenantID
	}
	return "sandbox " + b.SandboxID
}

// act pauses or stops every running sandbox under b.
func (e *Enforcer) act(ctx context.Context, b store.Budget, data map[string]string) error {
	if e.opts.Sandboxes == nil {
		return nil
	}
	list, err := e.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: b.TenantID, States: []store.SandboxState{store.StateRunning}})
	if err != nil {
		return fmt.Errorf("budget %s: list sandboxes: %w", b.ID, err)
	}
	var errList []error
	for _, sb := range list {
		if b.SandboxID != "" && sb.ID != b.SandboxID {
			continue
		}
		verb := e.opts.Sandboxes.BudgetStop
		if b.Action == store.BudgetPause {
			verb = e.opts.Sandboxes.BudgetPause
		}
		acted, err := verb(ctx, b.TenantID, sb.ID)
		if !acted && err == nil {
			continue
		}
		outcome := fmt.Sprintf("ok (budget %s: spend %s USD of cap %s USD per %s)", b.ID, data["spend"], data["cap"], b.Period)
		if err != nil {
			outcome = fmt.Sprintf("budget %s: %v", b.ID, err)
			errList = append(errList, fmt.Errorf("budget %s: %s sandbox %s: %w", b.ID, b.Action, sb.ID, err))
		} else {
			e.log.Info("budget "+b.Action, "budget", b.ID, "sandbox", sb.ID, "tenant", b.TenantID)
		}
		e.record(ctx, b.TenantID, "budget."+b.Action, sb.ID, outcome)
	}
	return errors.Join(errList...)
}

func (e *Enforcer) emit(ctx context.Context, typ string, b store.Budget, data map[string]string) {
	if e.opts.Events == nil {
		return
	}
	e.opts.Events.Emit(context.WithoutCancel(ctx), events.Event{Time: e.now(), Type: typ, Tenant: b.TenantID, Sandbox: b.SandboxID, Data: data})
}

func (e *Enforcer) record(ctx context.Context, tenant, action, target, outcome string) {
	if err := e.opts.Audit.Record(context.WithoutCancel(ctx), audit.Entry{Actor: "daemon", Tenant: tenant, Action: action, Target: target, Outcome: outcome}); err != nil {
		e.log.Error("audit record", "action", action, "target", target, "err", err)
	}
}

// MayRun returns nil when sandbox id of tenant may start or resume, and an
// error wrapping errs.ErrBudget naming the budget, its cap and the spend
// when a budget with action pause or stop over it (the sandbox's own, or
// its tenant's) has reached its cap in the current period.
func (e *Enforcer) MayRun(ctx context.Context, tenant, id string) error {
	list, err := e.st.ListBudgets(ctx, tenant)
	if err != nil {
		return fmt.Errorf("check budgets: %w", err)
	}
	now := e.now()
	for _, b := range list {
		if b.Action == store.BudgetWarn || (b.SandboxID != "" && b.SandboxID != id) {
			continue
		}
		m, err := e.measure(ctx, b, now)
		if err != nil {
			return fmt.Errorf("check budgets: %w", err)
		}
		if m.exceeded(b) {
			return fmt.Errorf("budget %s caps %s at %s USD per %s (action %s) and %s USD is spent this %s (%s): "+
				"raise the cap (stead budget set %s --cap AMOUNT) or wait for the next %s, from %s: %w",
				b.ID, subject(b), FormatUSD(b.CapMicros), b.Period, b.Action, FormatUSD(m.spend), b.Period, m.key,
				b.ID, b.Period, m.end.Format(time.RFC3339), errs.ErrBudget)
		}
	}
	return nil
}

// newID returns a new budget id.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "bdg-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

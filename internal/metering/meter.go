// Package metering meters what sandboxes use: running time by instance
// type, memory GiB-seconds and storage GB-hours (pool, local snapshots,
// repository), per sandbox and per tenant, and prices it.
//
// Crash ordering. A sandbox's running time is an interval in the store
// (store.MeterInterval), opened when it starts or resumes and closed when
// it pauses, stops or goes away; both are written synchronously, as the
// lifecycle event arrives. Every tick (Options.Interval, 60 s by default)
// moves the checkpoint of every open interval to now in one transaction.
// So after a kill -9:
//   - a sandbox still running when the daemon comes back keeps its
//     interval open: it is metered from its last checkpoint on, through the
//     time the daemon was down (it ran);
//   - a sandbox found dead (reconciliation marks it stopped) has its
//     interval closed at its last checkpoint: at most one interval of its
//     running time is lost, never billed twice or invented.
//
// Storage is sampled every StorageInterval (5 min by default) and the time
// since the previous sample, at the sizes seen, is added to a per-day row
// as byte-seconds; a crash loses at most one storage interval.
package metering

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metrics"
	"github.com/stead-dev/stead/internal/store"
)

// DefaultInterval is the meter's default tick: the most running time a
// crash of the daemon can lose.
const DefaultInterval = 60 * time.Second

// DefaultStorageInterval is how often storage is sampled by default.
const DefaultStorageInterval = 5 * time.Minute

// StorageSource reports what storage is in use now: one sample per
// subject and kind, with TenantID, Subject, Kind and Bytes set.
type StorageSource interface {
	StorageSamples(ctx context.Context) ([]store.StorageUsage, error)
}

// Options configure a Meter.
type Options struct {
	// Store keeps intervals and storage rows, and is read for sandboxes.
	Store store.Store
	// Interval is the checkpoint tick (default DefaultInterval).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Prices price the reports (default DefaultPrices).
	Prices *client.Prices
	// Storage is sampled at the first tick after StorageInterval has
	// passed since the last sample (nil: storage is not metered).
	Storage StorageSource
	// StorageInterval is how often storage is sampled (default
	// DefaultStorageInterval): sizing every dataset costs more than a
	// checkpoint, and a crash loses at most one storage interval.
	StorageInterval time.Duration
	// Metrics, when set, counts what is metered.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Meter is an events.Sink that meters sandboxes. Make it with New, hand it
// to the store's observer (events.ObserveStore) before reconciliation,
// call Recover after reconciliation, then Run.
type Meter struct {
	st     store.Store
	opts   Options
	prices client.Prices
	log    *slog.Logger

	mu sync.Mutex
	// recovering is true until Recover: the lifecycle events before it
	// are reconciliation's findings about sandboxes that died while the
	// daemon was down, so their intervals end at their last checkpoint.
	recovering  bool
	lastStorage time.Time
}

var _ events.Sink = (*Meter)(nil)

// New returns a meter in its recovering state (see Recover).
func New(opts Options) *Meter {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StorageInterval <= 0 {
		opts.StorageInterval = DefaultStorageInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := DefaultPrices()
	if opts.Prices != nil {
		p = *opts.Prices
	}
	return &Meter{st: opts.Store, opts: opts, prices: p, log: opts.Logger, recovering: true}
}

func (m *Meter) now() time.Time { return m.opts.Now().UTC() }

// Interval is the meter's tick.
func (m *Meter) Interval() time.Duration { return m.opts.Interval }

// Prices are the prices reports use.
func (m *Meter) Prices() client.Prices { return m.prices }

// meteredSpec is the part of a sandbox's spec the meter reads.
type meteredSpec struct {
	InstanceType string        `json:"instance_type"`
	Limits       client.Limits `json:"limits"`
}

func specOf(sb store.Sandbox) meteredSpec {
	var sp meteredSpec
	_ = json.Unmarshal(sb.Spec, &sp) // a spec that does not decode meters as custom with no limits
	if sp.InstanceType == "" {
		sp.InstanceType = "custom"
	}
	return sp
}

// Emit implements events.Sink: a sandbox that starts or resumes opens an
// interval at the event's time; one that pauses, stops, is archived,
// deleted, purged or fails closes it. Writes are synchronous (one small
// durable store write per transition).
func (m *Meter) Emit(ctx context.Context, e events.Event) {
	if e.Sandbox == "" {
		return
	}
	at := e.Time
	if at.IsZero() {
		at = m.now()
	}
	if opens(e) {
		if err := m.open(ctx, e.Tenant, e.Sandbox, at); err != nil {
			m.log.Error("meter: open a running interval", "sandbox", e.Sandbox, "err", err)
		}
		return
	}
	switch e.Type {
	case events.SandboxPaused, events.SandboxStopped, events.SandboxArchived, events.SandboxDeleted,
		events.SandboxPurged, events.SandboxError:
		m.mu.Lock()
		if m.recovering {
			at = time.Time{} // its last checkpoint: the store never ends an interval before it
		}
		m.mu.Unlock()
		m.close(ctx, e.Sandbox, at)
	}
}

func (m *Meter) open(ctx context.Context, tenant, id string, at time.Time) error {
	sb, err := m.st.GetSandbox(ctx, "", id)
	if err != nil {
		return err
	}
	_, err = m.st.OpenMeterInterval(ctx, interval(tenant, sb, at))
	return err
}

// interval is the running interval of sb from at.
func interval(tenant string, sb store.Sandbox, at time.Time) store.MeterInterval {
	sp := specOf(sb)
	if tenant == "" {
		tenant = sb.TenantID
	}
	return store.MeterInterval{TenantID: tenant, SandboxID: sb.ID, InstanceType: sp.InstanceType,
		CPUs: sp.Limits.CPUs, MemoryBytes: sp.Limits.MemoryBytes, Start: at}
}

// opens reports whether e opens a running interval: a start, a resume,
// or a create from the warm pool (its record is made running: it starts
// no sandbox, and runs from its create on).
func opens(e events.Event) bool {
	switch e.Type {
	case events.SandboxCreated:
		return e.State == string(store.StateRunning)
	case events.SandboxStarted, events.SandboxResumed:
		return true
	}
	return false
}

// OpensInterval implements events.IntervalOpener: the interval a start opens,
// which then commits with the start.
func (m *Meter) OpensInterval(e events.Event, sb store.Sandbox) (store.MeterInterval, bool) {
	if e.Sandbox == "" || e.Sandbox != sb.ID || !opens(e) {
		return store.MeterInterval{}, false
	}
	at := e.Time
	if at.IsZero() {
		at = m.now()
	}
	return interval(e.Tenant, sb, at), true
}

// EmitOpened implements events.IntervalOpener: e's interval was opened
// with it, and opening is all a start asks of the meter.
func (m *Meter) EmitOpened(context.Context, events.Event) {}

func (m *Meter) close(ctx context.Context, id string, at time.Time) {
	before, _ := m.st.ListMeterIntervals(ctx, store.MeterFilter{SandboxID: id, OpenOnly: true})
	iv, err := m.st.CloseMeterInterval(ctx, id, at)
	if errors.Is(err, errs.ErrNotFound) {
		return // not running: nothing to close
	}
	if err != nil {
		m.log.Error("meter: close a running interval", "sandbox", id, "err", err)
		return
	}
	if len(before) == 1 {
		m.count(before, iv.Checkpoint)
	}
}

// count adds to the metrics the running time of ivs from their
// checkpoint to end.
func (m *Meter) count(ivs []store.MeterInterval, end time.Time) {
	if m.opts.Metrics == nil {
		return
	}
	secs := map[string]float64{}
	mem := 0.0
	for _, iv := range ivs {
		d := end.Sub(iv.Checkpoint).Seconds()
		if d <= 0 {
			continue
		}
		secs[iv.InstanceType] += d
		mem += d * float64(iv.MemoryBytes) / (1 << 30)
	}
	m.opts.Metrics.ObserveMeter(secs, mem, nil)
}

// Recover ends the recovering state. Call it once reconciliation has
// made the store agree with the runtime: an interval still open whose
// sandbox is not running is closed at its last checkpoint (it died while
// the daemon was down); one whose sandbox runs stays open and is metered
// on from its last checkpoint; a running sandbox without an open interval
// (metered by no earlier daemon) gets one from now.
func (m *Meter) Recover(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	open, err := m.st.ListMeterIntervals(ctx, store.MeterFilter{OpenOnly: true})
	if err != nil {
		return fmt.Errorf("meter recover: %w", err)
	}
	isOpen := map[string]bool{}
	for _, iv := range open {
		sb, err := m.st.GetSandbox(ctx, "", iv.SandboxID)
		if err == nil && sb.State == store.StateRunning {
			isOpen[iv.SandboxID] = true
			continue
		}
		if _, err := m.st.CloseMeterInterval(ctx, iv.SandboxID, time.Time{}); err != nil && !errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("meter recover: %w", err)
		}
		m.log.Info("meter: closed the interval of a sandbox that stopped while the daemon was down, at its last checkpoint",
			"sandbox", iv.SandboxID, "checkpoint", iv.Checkpoint)
	}
	running, err := m.st.ListSandboxes(ctx, store.SandboxFilter{States: []store.SandboxState{store.StateRunning}})
	if err != nil {
		return fmt.Errorf("meter recover: %w", err)
	}
	now := m.now()
	for _, sb := range running {
		if isOpen[sb.ID] {
			continue
		}
		if err := m.open(ctx, sb.TenantID, sb.ID, now); err != nil {
			return fmt.Errorf("meter recover: %w", err)
		}
	}
	m.recovering = false
	return nil
}

// Run ticks every Interval until ctx ends.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.Tick(ctx); err != nil {
				m.log.Error("meter tick", "err", err)
			}
		}
	}
}

// Tick checkpoints every open interval at now and, when StorageInterval
// has passed, samples storage: the time since the previous sample, at the
// sizes seen now, is added to the day's rows. The first sample of a meter
// only sets where the next one counts from.
func (m *Meter) Tick(ctx context.Context) error {
	now := m.now()
	open, err := m.st.ListMeterIntervals(ctx, store.MeterFilter{OpenOnly: true})
	if err != nil {
		return fmt.Errorf("meter tick: %w", err)
	}
	n, err := m.st.CheckpointMeterIntervals(ctx, now)
	if err != nil {
		return fmt.Errorf("meter tick: %w", err)
	}
	m.count(open, now)
	m.opts.Metrics.MeterTick(n)
	if m.opts.Storage == nil {
		return nil
	}
	m.mu.Lock()
	last := m.lastStorage
	m.mu.Unlock()
	if !last.IsZero() && now.Sub(last) < m.opts.StorageInterval {
		return nil
	}
	samples, err := m.opts.Storage.StorageSamples(ctx)
	if err != nil {
		return fmt.Errorf("meter tick: sample storage: %w", err)
	}
	m.mu.Lock()
	m.lastStorage = now
	m.mu.Unlock()
	dt := 0.0
	if !last.IsZero() && now.After(last) {
		dt = now.Sub(last).Seconds()
	}
	gbh := map[string]float64{}
	var repoBytes int64
	for i := range samples {
		samples[i].Day = now
		samples[i].ByteSeconds = float64(samples[i].Bytes) * dt
		gbh[samples[i].Kind] += samples[i].ByteSeconds / 1e9 / 3600
		if samples[i].Kind == store.StorageRepository {
			repoBytes += samples[i].Bytes
		}
	}
	if err := m.st.AddStorageUsage(ctx, samples); err != nil {
		return fmt.Errorf("meter tick: %w", err)
	}
	if m.opts.Metrics != nil {
		m.opts.Metrics.ObserveMeter(nil, 0, gbh)
		m.opts.Metrics.SetRepositoryBytes(repoBytes)
	}
	return nil
}

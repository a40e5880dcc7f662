// Package metrics holds stead's Prometheus metrics: one Metrics value made
// by New on a registerer the daemon owns (no global registry, no
// package-level state), handed to the parts that count.
//
// Families (all prefixed stead_):
//
//	sandboxes{state}                              gauge, read from the store at scrape
//	lifecycle_seconds{op}                         histogram: create, start, stop, pause, resume
//	push_bytes_total, restore_bytes_total         counters (bytes uploaded / downloaded)
//	push_seconds, restore_seconds                 histograms
//	repository_bytes                              gauge: what tenants keep in the repository (sampled by the meter)
//	pool_used_bytes, pool_size_bytes, pool_fill_ratio  gauges, read from the pool at scrape
//	api_requests_total{method,route,status}       counter; route is the route template, never the raw path
//	api_request_seconds{method,route}             histogram
//	meter_compute_seconds_total{instance_type}    counter: running seconds metered
//	meter_memory_gib_seconds_total                counter
//	meter_storage_gb_hours_total{kind}            counter: pool, snapshots, repository
//	meter_checkpoints_total, meter_open_intervals counter, gauge
//	webhook_deliveries_total{outcome}             counter: delivered, failed, retried (for the webhook sender)
//	webhook_delivery_seconds                      histogram
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every family.
const Namespace = "stead"

// Metrics are stead's metric families. A nil *Metrics is valid: its
// methods count nothing, so parts built without metrics (tests) need no
// checks.
type Metrics struct {
	reg    prometheus.Registerer
	gather prometheus.Gatherer

	Lifecycle       *prometheus.HistogramVec
	PushBytes       prometheus.Counter
	RestoreBytes    prometheus.Counter
	PushSeconds     prometheus.Histogram
	RestoreSeconds  prometheus.Histogram
	RepositoryBytes prometheus.Gauge
	APIRequests     *prometheus.CounterVec
	APISeconds      *prometheus.HistogramVec
	ComputeSeconds  *prometheus.CounterVec
	MemoryGiBSecs   prometheus.Counter
	StorageGBHours  *prometheus.CounterVec
	MeterTicks      prometheus.Counter
	OpenIntervals   prometheus.Gauge
	// WebhookDeliveries counts webhook delivery attempts by outcome
	// ("delivered", "failed", "retried").
	WebhookDeliveries *prometheus.CounterVec
	// WebhookSeconds is how long a delivery attempt took.
	WebhookSeconds prometheus.Histogram
}

// latencyBuckets suit lifecycle operations: a pause takes a millisecond,
// a stop with its grace period up to a minute.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New makes the families and registers them, with the Go runtime and
// process collectors, on reg. gather serves /metrics (usually the same
// *prometheus.Registry).
func New(reg prometheus.Registerer, gather prometheus.Gatherer) *Metrics {
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: Namespace, Name: name, Help: help}
	}
	h := func(name, help string, b []float64) prometheus.HistogramOpts {
		return prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: b}
	}
	m := &Metrics{
		reg: reg, gather: gather,
		Lifecycle:       prometheus.NewHistogramVec(h("lifecycle_seconds", "Duration of sandbox lifecycle operations requested through the API.", latencyBuckets), []string{"op"}),
		PushBytes:       prometheus.NewCounter(prometheus.CounterOpts(f("push_bytes_total", "Bytes uploaded to the repository by pushes."))),
		RestoreBytes:    prometheus.NewCounter(prometheus.CounterOpts(f("restore_bytes_total", "Bytes downloaded from the repository by restores and pulls."))),
		PushSeconds:     prometheus.NewHistogram(h("push_seconds", "Duration of pushes.", prometheus.ExponentialBuckets(0.05, 2, 14))),
		RestoreSeconds:  prometheus.NewHistogram(h("restore_seconds", "Duration of restores and pulls.", prometheus.ExponentialBuckets(0.05, 2, 14))),
		RepositoryBytes: prometheus.NewGauge(prometheus.GaugeOpts(f("repository_bytes", "Bytes tenants keep in the repository (sum of what their pushes stored), as last sampled."))),
		APIRequests:     prometheus.NewCounterVec(prometheus.CounterOpts(f("api_requests_total", "API requests by method, route template and status.")), []string{"method", "route", "status"}),
		APISeconds:      prometheus.NewHistogramVec(h("api_request_seconds", "API request duration by method and route template.", latencyBuckets), []string{"method", "route"}),
		ComputeSeconds:  prometheus.NewCounterVec(prometheus.CounterOpts(f("meter_compute_seconds_total", "Running seconds metered, by instance type.")), []string{"instance_type"}),
		MemoryGiBSecs:   prometheus.NewCounter(prometheus.CounterOpts(f("meter_memory_gib_seconds_total", "Memory GiB-seconds metered (memory limit x running seconds)."))),
		StorageGBHours:  prometheus.NewCounterVec(prometheus.CounterOpts(f("meter_storage_gb_hours_total", "Storage GB-hours metered, by kind (pool, snapshots, repository).")), []string{"kind"}),
		MeterTicks:      prometheus.NewCounter(prometheus.CounterOpts(f("meter_checkpoints_total", "Meter ticks that checkpointed the open intervals."))),
		OpenIntervals:   prometheus.NewGauge(prometheus.GaugeOpts(f("meter_open_intervals", "Running intervals open at the last tick."))),
		WebhookDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts(f("webhook_deliveries_total", "Webhook delivery attempts by outcome (delivered, failed, retried).")),
			[]string{"outcome"}),
		WebhookSeconds: prometheus.NewHistogram(h("webhook_delivery_seconds", "Duration of webhook delivery attempts.", latencyBuckets)),
	}
	reg.MustRegister(m.Lifecycle, m.PushBytes, m.RestoreBytes, m.PushSeconds, m.RestoreSeconds, m.RepositoryBytes,
		m.APIRequests, m.APISeconds, m.ComputeSeconds, m.MemoryGiBSecs, m.StorageGBHours, m.MeterTicks, m.OpenIntervals,
		m.WebhookDeliveries, m.WebhookSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Series that exist before their first count, so a dashboard sees 0.
	for _, o := range []string{"delivered", "failed", "retried"} {
		m.WebhookDeliveries.WithLabelValues(o)
	}
	return m
}

// Handler serves the registered families in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.gather, promhttp.HandlerOpts{})
}

// ObserveLifecycle records the duration of a lifecycle operation.
func (m *Metrics) ObserveLifecycle(op string, d time.Duration) {
	if m != nil {
		m.Lifecycle.WithLabelValues(op).Observe(d.Seconds())
	}
}

// ObserveRequest counts an API request. route must be the route template
// ("GET /v1/sandboxes/{id}"), or "unmatched".
func (m *Metrics) ObserveRequest(method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	m.APIRequests.WithLabelValues(method, route, statusText(status)).Inc()
	m.APISeconds.WithLabelValues(method, route).Observe(d.Seconds())
}

func statusText(code int) string {
	const digits = "0123456789"
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{digits[code/100], digits[code/10%10], digits[code%10]})
}

// ObserveTransfer records a finished push ("push") or restore ("restore").
func (m *Metrics) ObserveTransfer(kind string, bytes int64, d time.Duration) {
	if m == nil {
		return
	}
	switch kind {
	case "push":
		m.PushBytes.Add(float64(max(bytes, 0)))
		m.PushSeconds.Observe(d.Seconds())
	case "restore":
		m.RestoreBytes.Add(float64(max(bytes, 0)))
		m.RestoreSeconds.Observe(d.Seconds())
	}
}

// ObserveMeter adds what was metered: running seconds by instance type,
// memory GiB-seconds and storage GB-hours by kind.
func (m *Metrics) ObserveMeter(computeSeconds map[string]float64, memGiBSeconds float64, storageGBHours map[string]float64) {
	if m == nil {
		return
	}
	for t, s := range computeSeconds {
		m.ComputeSeconds.WithLabelValues(t).Add(s)
	}
	m.MemoryGiBSecs.Add(memGiBSeconds)
	for k, g := range storageGBHours {
		m.StorageGBHours.WithLabelValues(k).Add(g)
	}
}

// MeterTick counts a meter tick that left open intervals open.
func (m *Metrics) MeterTick(open int) {
	if m != nil {
		m.MeterTicks.Inc()
		m.OpenIntervals.Set(float64(open))
	}
}

// SetRepositoryBytes sets the repository size gauge.
func (m *Metrics) SetRepositoryBytes(b int64) {
	if m != nil {
		m.RepositoryBytes.Set(float64(b))
	}
}

// GaugeSource is read at every scrape.
type GaugeSource interface {
	// SandboxesByState counts the sandboxes in each state.
	SandboxesByState(ctx context.Context) (map[string]int, error)
	// PoolUsage reports the pool's used and total bytes.
	PoolUsage(ctx context.Context) (used, size int64, err error)
}

// WatchState registers the gauges read from src at scrape time: sandboxes
// by state and the pool's fill.
func (m *Metrics) WatchState(src GaugeSource) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&stateCollector{src: src,
		sandboxes: prometheus.NewDesc(Namespace+"_sandboxes", "Sandboxes by state.", []string{"state"}, nil),
		used:      prometheus.NewDesc(Namespace+"_pool_used_bytes", "Bytes in use on the storage pool's file system.", nil, nil),
		size:      prometheus.NewDesc(Namespace+"_pool_size_bytes", "Size of the storage pool's file system.", nil, nil),
		fill:      prometheus.NewDesc(Namespace+"_pool_fill_ratio", "Fraction of the storage pool in use (0 to 1).", nil, nil),
	})
}

// States are the sandbox states always reported (zero when none).
var states = []string{"creating", "running", "paused", "stopped", "archived", "deleted", "error"}

type stateCollector struct {
	src                         GaugeSource
	sandboxes, used, size, fill *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sandboxes
	ch <- c.used
	ch <- c.size
	ch <- c.fill
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if by, err := c.src.SandboxesByState(ctx); err == nil {
		for _, s := range states {
			ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(by[s]), s)
		}
	}
	if used, size, err := c.src.PoolUsage(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(used))
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(size))
		fill := 0.0
		if size > 0 {
			fill = float64(used) / float64(size)
		}
		ch <- prometheus.MustNewConstMetric(c.fill, prometheus.GaugeValue, fill)
	}
}

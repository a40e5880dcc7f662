package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metering"
	"github.com/stead-dev/stead/internal/metrics"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
)

// MeteringConfig configures metering and the Prometheus metrics.
type MeteringConfig struct {
	// Interval is the meter's checkpoint tick: the most running time a
	// kill -9 can lose (0: metering.DefaultInterval).
	Interval time.Duration
	// StorageInterval is how often storage is sampled (0:
	// metering.DefaultStorageInterval).
	StorageInterval time.Duration
	// PricesFile is a JSON file of client.Prices ("" = the defaults).
	PricesFile string
	// MetricsListen is the address of the unauthenticated /metrics
	// endpoint ("" = off).
	MetricsListen string
}

// metered holds the daemon's meter and metrics.
type metered struct {
	met   *metrics.Metrics
	meter *metering.Meter
}

// newMetered makes the metrics and the meter, and adds to sinks what
// listens for events: the meter (lifecycle) and the transfer counters
// (operation.finished). Call before reconciliation.
func newMetered(cfg MeteringConfig, st store.Store, svc *sandbox.Service, sinks *events.Multi, repoLead func(context.Context) (context.Context, bool), log *slog.Logger) (*metered, error) {
	prices, err := metering.LoadPrices(cfg.PricesFile)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	met := metrics.New(reg, reg)
	met.WatchState(svc)
	meter := metering.New(metering.Options{Store: st, Interval: cfg.Interval, StorageInterval: cfg.StorageInterval, Prices: &prices,
		Storage: svc.StorageSampler(15 * time.Minute).RepositoryOnlyWhen(repoLead), Metrics: met, Logger: log})
	*sinks = append(*sinks, meter, transferSink(met))
	return &metered{met: met, meter: meter}, nil
}

// transferSink counts finished pushes and restores.
func transferSink(met *metrics.Metrics) events.Sink {
	return events.SinkFunc(func(_ context.Context, e events.Event) {
		if e.Type != sandbox.OperationFinished || e.Data["state"] != "succeeded" {
			return
		}
		kind := ""
		switch e.Data["kind"] {
		case "push", "volume-push":
			kind = "push"
		case "restore", "pull", "volume-restore":
			kind = "restore"
		default:
			return
		}
		b, _ := strconv.ParseInt(e.Data["bytes"], 10, 64)
		secs, _ := strconv.ParseFloat(e.Data["seconds"], 64)
		met.ObserveTransfer(kind, b, time.Duration(secs*float64(time.Second)))
	})
}

// serveMetrics serves /metrics on addr, unauthenticated, until ctx ends.
func serveMetrics(ctx context.Context, addr string, met *metrics.Metrics, errc chan<- error, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", met.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics: %w", err)
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Info("serving Prometheus metrics (unauthenticated)", "addr", ln.Addr().String(), "path", "/metrics")
	return nil
}

// timedService is the service as the API sees it, with the lifecycle
// verbs timed into the metrics. Embedding keeps every other method (and so
// every optional backend interface) as it is.
type timedService struct {
	*sandbox.Service
	met *metrics.Metrics
}

func (t timedService) time(op string, start time.Time, err error) {
	if err == nil {
		t.met.ObserveLifecycle(op, time.Since(start))
	}
}

// CreateSandbox is the service's, timed.
func (t timedService) CreateSandbox(ctx context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error) {
	start := time.Now()
	sb, err := t.Service.CreateSandbox(ctx, tenant, req)
	t.time("create", start, err)
	return sb, err
}

// StartSandbox is the service's, timed.
func (t timedService) StartSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	start := time.Now()
	sb, err := t.Service.StartSandbox(ctx, tenant, id)
	t.time("start", start, err)
	return sb, err
}

// StopSandbox is the service's, timed.
func (t timedService) StopSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	start := time.Now()
	sb, err := t.Service.StopSandbox(ctx, tenant, id)
	t.time("stop", start, err)
	return sb, err
}

// PauseSandbox is the service's, timed.
func (t timedService) PauseSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	start := time.Now()
	sb, err := t.Service.PauseSandbox(ctx, tenant, id)
	t.time("pause", start, err)
	return sb, err
}

// ResumeSandbox is the service's, timed.
func (t timedService) ResumeSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	start := time.Now()
	sb, err := t.Service.ResumeSandbox(ctx, tenant, id)
	t.time("resume", start, err)
	return sb, err
}

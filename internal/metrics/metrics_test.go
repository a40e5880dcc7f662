package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type gauges struct{}

func (gauges) SandboxesByState(context.Context) (map[string]int, error) {
	return map[string]int{"running": 2, "stopped": 1}, nil
}

func (gauges) PoolUsage(context.Context) (int64, int64, error) { return 25, 100, nil }

// TestFamiliesAfterActivity: after a little of everything, the scrape
// shows every family, the state gauges read at scrape time included.
func TestFamiliesAfterActivity(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, reg)
	m.WatchState(gauges{})
	m.ObserveLifecycle("start", 30*time.Millisecond)
	m.ObserveRequest("GET", "/v1/sandboxes/{id}", 404, time.Millisecond)
	m.ObserveTransfer("push", 1<<20, 2*time.Second)
	m.ObserveTransfer("restore", 2<<20, time.Second)
	m.ObserveMeter(map[string]float64{"small": 60}, 120, map[string]float64{"pool": 0.5})
	m.MeterTick(3)
	m.SetRepositoryBytes(4096)
	m.WebhookDeliveries.WithLabelValues("delivered").Inc()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	text := string(b)
	for _, want := range []string{
		`stead_sandboxes{state="running"} 2`, `stead_sandboxes{state="paused"} 0`,
		`stead_pool_fill_ratio 0.25`, `stead_pool_used_bytes 25`,
		`stead_lifecycle_seconds_count{op="start"} 1`,
		`stead_api_requests_total{method="GET",route="/v1/sandboxes/{id}",status="404"} 1`,
		`stead_push_bytes_total 1.048576e+06`, `stead_restore_bytes_total 2.097152e+06`,
		`stead_push_seconds_count 1`, `stead_restore_seconds_count 1`,
		`stead_meter_compute_seconds_total{instance_type="small"} 60`,
		`stead_meter_memory_gib_seconds_total 120`,
		`stead_meter_storage_gb_hours_total{kind="pool"} 0.5`,
		`stead_meter_checkpoints_total 1`, `stead_meter_open_intervals 3`,
		`stead_repository_bytes 4096`,
		`stead_webhook_deliveries_total{outcome="delivered"} 1`, `stead_webhook_deliveries_total{outcome="failed"} 0`,
		`stead_webhook_delivery_seconds_count 0`,
		`process_open_fds`, `go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestNilMetricsCountNothing: parts built without metrics need no checks.
func TestNilMetricsCountNothing(t *testing.T) {
	var m *Metrics
	m.ObserveLifecycle("start", time.Second)
	m.ObserveRequest("GET", "/", 200, time.Second)
	m.ObserveTransfer("push", 1, time.Second)
	m.ObserveMeter(nil, 0, nil)
	m.MeterTick(0)
	m.SetRepositoryBytes(0)
	m.WatchState(gauges{})
}

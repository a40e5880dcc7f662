package daemon

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/metrics"
	"github.com/stead-dev/stead/internal/sandbox"
)

// TestTransferSinkCountsFinishedPushesAndRestores: the end of a push or a
// restore (sandbox.OperationFinished) adds its bytes and duration; failed
// operations and other kinds add nothing.
func TestTransferSinkCountsFinishedPushesAndRestores(t *testing.T) {
	reg := prometheus.NewRegistry()
	met := metrics.New(reg, reg)
	sink := transferSink(met)
	ctx := context.Background()
	for _, e := range []events.Event{
		{Type: sandbox.OperationFinished, Data: map[string]string{"kind": "push", "state": "succeeded", "bytes": "1000", "seconds": "2.5"}},
		{Type: sandbox.OperationFinished, Data: map[string]string{"kind": "volume-push", "state": "succeeded", "bytes": "24", "seconds": "1"}},
		{Type: sandbox.OperationFinished, Data: map[string]string{"kind": "push", "state": "failed", "bytes": "99", "seconds": "1"}},
		{Type: sandbox.OperationFinished, Data: map[string]string{"kind": "pull", "state": "succeeded", "bytes": "500", "seconds": "1"}},
		{Type: sandbox.OperationFinished, Data: map[string]string{"kind": "check", "state": "succeeded"}},
		{Type: events.SandboxStarted},
	} {
		sink.Emit(ctx, e)
	}
	if got := testutil.ToFloat64(met.PushBytes); got != 1024 {
		t.Errorf("push bytes = %v, want 1024", got)
	}
	if got := testutil.ToFloat64(met.RestoreBytes); got != 500 {
		t.Errorf("restore bytes = %v, want 500", got)
	}
	if n := testutil.CollectAndCount(met.PushSeconds); n != 1 {
		t.Errorf("push seconds series = %d", n)
	}
}

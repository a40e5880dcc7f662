package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// TestCheckpointsSurviveDaemonKill9DuringPuts: every acknowledged put is
// there after a kill -9 and restart, and no document is torn.
func TestCheckpointsSurviveDaemonKill9DuringPuts(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		var acked, n atomic.Int64 // the latest version acknowledged, and how many this round
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := int64(1); ; i++ {
				body, _ := json.Marshal(map[string]any{"step": i, "round": round, "pad": fmt.Sprintf("%0200d", i)})
				cp, err := d.c.PutCheckpoint(context.Background(), sb.ID, "progress", body, client.PutCheckpointOptions{})
				if err != nil {
					return // the daemon is gone
				}
				acked.Store(cp.Version)
				n.Add(1)
			}
		}()
		// Kill amid the puts, after a number of them (more each round),
		// not after a time: a loaded machine may acknowledge none in it.
		for want, deadline := int64(50*(round+1)), time.Now().Add(30*time.Second); n.Load() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d puts acknowledged in 30 s, want %d before the kill", round, n.Load(), want)
			}
		}
		d.kill9()
		<-done
		d.start()
		want := acked.Load()
		if want == 0 {
			t.Fatalf("round %d: no put was acknowledged", round)
		}
		got, err := d.c.GetCheckpoint(ctx, sb.ID, "", "progress", 0)
		if err != nil {
			t.Fatal(err)
		}
		if got.Version < want {
			t.Fatalf("round %d: acknowledged version %d lost; latest is %d", round, want, got.Version)
		}
		var doc struct {
			Step  int64  `json:"step"`
			Round int    `json:"round"`
			Pad   string `json:"pad"`
		}
		if err := json.Unmarshal(got.Body, &doc); err != nil || doc.Pad != fmt.Sprintf("%0200d", doc.Step) || doc.Round != round {
			t.Fatalf("round %d: torn document %s (%v)", round, got.Body, err)
		}
		t.Logf("round %d: %d acknowledged, latest %d", round, want, got.Version)
	}
}

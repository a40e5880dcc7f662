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

// TestSessionAppendsSurviveDaemonKill9: every acknowledged event is there
// after a kill -9 and restart; a tool intent whose result was never
// appended is reported in doubt by resume, and by orient.
func TestSessionAppendsSurviveDaemonKill9(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	th, err := d.c.CreateThread(ctx, sb.ID, client.CreateThreadRequest{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := d.c.StartRun(ctx, sb.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	intent, err := d.c.AppendEvent(ctx, sb.ID, run.ID, client.AppendEvent{Type: "tool_intent", Payload: json.RawMessage(`{"tool":"deploy"}`), IdempotencyKey: "deploy-1"})
	if err != nil {
		t.Fatal(err)
	}
	var acked, n atomic.Int64 // the latest seq acknowledged, and how many notes
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			ev, err := d.c.AppendEvent(context.Background(), sb.ID, run.ID, client.AppendEvent{Type: "note",
				Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), IdempotencyKey: fmt.Sprintf("note-%d", i)})
			if err != nil {
				return
			}
			acked.Store(ev.Seq)
			n.Add(1)
		}
	}()
	// Kill amid the appends, after a number of them, not after a time: a
	// loaded machine may acknowledge too few in it.
	for deadline := time.Now().Add(30 * time.Second); n.Load() < 50; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d appends acknowledged in 30 s, want 50 before the kill", n.Load())
		}
	}
	d.kill9()
	<-done
	d.start()
	res, err := d.c.ResumeRun(ctx, sb.ID, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Run.LastSeq < acked.Load() || acked.Load() < 2 {
		t.Fatalf("acknowledged seq %d lost: last seq %d", acked.Load(), res.Run.LastSeq)
	}
	if len(res.InDoubt) != 1 || res.InDoubt[0].Seq != intent.Seq {
		t.Fatalf("in doubt after restart: %+v", res.InDoubt)
	}
	// Retrying the intent's append with its key stores nothing new.
	again, err := d.c.AppendEvent(ctx, sb.ID, run.ID, client.AppendEvent{Type: "tool_intent", Payload: json.RawMessage(`{"tool":"deploy"}`), IdempotencyKey: "deploy-1"})
	if err != nil || again.Seq != intent.Seq {
		t.Fatalf("idempotent retry: %+v %v", again, err)
	}
	or, err := d.c.Orient(ctx, sb.ID, nil, 5)
	if err != nil || or.Run == nil || len(or.Run.InDoubt) != 1 {
		t.Fatalf("orient after restart: %+v %v", or.Run, err)
	}
	t.Logf("%d events acknowledged before the kill", acked.Load())
}

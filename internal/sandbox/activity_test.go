package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/store"
)

// testClock is a clock the test moves while the API's goroutines read it.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAgentAPICallsKeepASandboxAwake is issue 10, item 10: an agent that
// only sleeps and, every minute of a 10-minute idle timeout, calls its own
// API through its token (checkpoints, session log, tasks, observations,
// kv, orient) is never stopped as idle; nor is one whose harness outside
// writes its checkpoints with an API key. Once only reads of other callers
// remain (a dashboard polling its checkpoints), it is stopped as idle.
func TestAgentAPICallsKeepASandboxAwake(t *testing.T) {
	s := newService(t)
	s.opts.TokenKey = []byte("activity-test-token-key-01234567")
	s.wireTenancy() // the token key is checked there
	clock := &testClock{t: time.Now()}
	s.opts.Now = clock.now
	ctx := context.Background()
	tn := store.DefaultTenant
	srv := httptest.NewServer(api.NewHandler(s, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	key, err := s.CreateAPIKey(ctx, api.Principal{TenantID: tn, Admin: true}, client.CreateAPIKeyRequest{Name: "ops", Role: client.RoleTenantUser})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, tn, client.CreateSandboxRequest{Name: "worker", IdleTimeout: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	agent := agentHTTP{t: t, url: srv.URL, token: s.SandboxToken(sb.ID)}
	ops := agentHTTP{t: t, url: srv.URL, token: key.Secret}
	base := "/v1/sandboxes/" + sb.ID
	var th client.Thread
	agent.must(http.StatusCreated, &th, http.MethodPost, base+"/threads", `{"name":"main"}`)
	var run client.Run
	agent.must(http.StatusCreated, &run, http.MethodPost, base+"/threads/"+th.ID+"/runs", "")
	calls := []func(i int){
		func(i int) {
			agent.must(http.StatusOK, nil, http.MethodPut, base+"/checkpoints/plan", fmt.Sprintf(`{"step":%d}`, i))
		},
		func(i int) {
			agent.must(http.StatusOK, nil, http.MethodPost, base+"/threads/runs/"+run.ID+"/events", `{"events":[{"type":"note","payload":"thinking"}]}`)
		},
		func(i int) {
			agent.must(http.StatusCreated, nil, http.MethodPost, base+"/tasks", `{"payload":{"todo":"next"}}`)
		},
		func(i int) {
			agent.must(http.StatusCreated, nil, http.MethodPost, base+"/observations", `{"kind":"note","payload":"seen"}`)
		},
		func(i int) { agent.must(http.StatusOK, nil, http.MethodPut, base+"/kv/progress", fmt.Sprintf(`%d`, i)) },
		func(i int) { agent.must(http.StatusOK, nil, http.MethodGet, base+"/orient", "") },
		func(i int) { agent.must(http.StatusOK, nil, http.MethodGet, base+"/checkpoints/plan", "") },
		// A harness outside the sandbox, by name, with an API key.
		func(i int) {
			ops.must(http.StatusOK, nil, http.MethodPut, "/v1/sandboxes/worker/checkpoints/plan", fmt.Sprintf(`{"step":%d}`, i))
		},
	}
	s.IdleCheck(ctx) // the first cpu sample
	for i := range 3 * len(calls) {
		clock.add(time.Minute)
		calls[i%len(calls)](i)
		if acted := s.IdleCheck(ctx); len(acted) > 0 {
			t.Fatalf("minute %d: an agent at work through its API was stopped as idle", i+1)
		}
	}
	for i := range 11 {
		clock.add(time.Minute)
		ops.must(http.StatusOK, nil, http.MethodGet, base+"/checkpoints/plan", "")
		ops.must(http.StatusOK, nil, http.MethodGet, base+"/orient", "")
		s.IdleCheck(ctx)
		if i < 9 {
			if got, _ := s.GetSandbox(ctx, tn, sb.ID); got.State != "running" {
				t.Fatalf("stopped %d minutes after the agent's last call, before the idle timeout", i+1)
			}
		}
	}
	got, _ := s.GetSandbox(ctx, tn, sb.ID)
	if got.State != "stopped" || got.StopReason != "idle" {
		t.Fatalf("reads by others kept the sandbox awake: %s %q", got.State, got.StopReason)
	}
	// A stopped sandbox's agent state can still be read with its token,
	// and that neither starts it nor leaves it tracked.
	agent.must(http.StatusOK, nil, http.MethodGet, base+"/checkpoints/plan", "")
	if _, _, tracked := s.act.lastActivity(sb.ID); tracked {
		t.Fatal("a stopped sandbox is tracked for activity")
	}
}

// trafficSource stands in for the network layer's ActivitySource until
// networking exists: it reports activity while busy is set.
type trafficSource struct {
	mu   sync.Mutex
	busy bool
}

func (*trafficSource) Kind() ActivityKind { return ActivityNetwork }

func (s *trafficSource) Active(context.Context, string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy, nil
}

// TestActivitySourcesAreAskedAtEveryIdleCheck: what an ActivitySource
// reports (network traffic, later) keeps a sandbox awake; once it reports
// nothing for the idle timeout, the sandbox is stopped.
func TestActivitySourcesAreAskedAtEveryIdleCheck(t *testing.T) {
	s := newService(t)
	src := &trafficSource{busy: true}
	s.opts.ActivitySources = []ActivitySource{src}
	clock := &testClock{t: time.Now()}
	s.opts.Now = clock.now
	ctx := context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{IdleTimeout: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		clock.add(time.Minute)
		if acted := s.IdleCheck(ctx); len(acted) > 0 {
			t.Fatal("a sandbox with network traffic was stopped as idle")
		}
	}
	if _, kind, _ := s.act.lastActivity(sb.ID); kind != ActivityNetwork {
		t.Fatalf("last activity recorded as %q", kind)
	}
	src.mu.Lock()
	src.busy = false
	src.mu.Unlock()
	for range 11 {
		clock.add(time.Minute)
		s.IdleCheck(ctx)
	}
	if got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); got.State != "stopped" || got.StopReason != "idle" {
		t.Fatalf("a sandbox without traffic: %s %q", got.State, got.StopReason)
	}
}

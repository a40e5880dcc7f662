package portproxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sleepingSandbox is a stopped sandbox whose app starts listening on its
// port only once it is woken, ~200 ms into Wake.
type sleepingSandbox struct {
	mu      sync.Mutex
	state   string
	port    int
	wakes   atomic.Int64
	started *httptest.Server
}

func newSleepingSandbox(t *testing.T, state string) *sleepingSandbox {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sleepingSandbox{state: state, port: ln.Addr().(*net.TCPAddr).Port}
	_ = ln.Close() // free until woken
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.started != nil {
			s.started.Close()
		}
	})
	return s
}

func (s *sleepingSandbox) target(autoResume bool) func(context.Context, string, int) (Target, error) {
	return func(_ context.Context, id string, port int) (Target, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		t := Target{SandboxID: testSandbox, Tenant: "t1", State: s.state, AutoResume: autoResume,
			Exposed: port == s.port, Public: true}
		if s.state == stateRunning {
			t.Addr = loopback()
		}
		return t, nil
	}
}

// wake starts the app after delay, then reports the sandbox running.
func (s *sleepingSandbox) wake(t *testing.T, delay time.Duration, listen bool) func(context.Context, string) error {
	return func(ctx context.Context, id string) error {
		s.wakes.Add(1)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if listen && s.started == nil {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
			if err != nil {
				t.Errorf("listen on the woken sandbox's port: %v", err)
				return err
			}
			srv := httptest.NewUnstartedServer(appMux(nil))
			_ = srv.Listener.Close()
			srv.Listener = ln
			srv.Start()
			s.started = srv
		}
		s.state = stateRunning
		return nil
	}
}

func TestWakeStartsStoppedSandboxOnceForConcurrentRequests(t *testing.T) {
	f := newFixture(t)
	s := newSleepingSandbox(t, stateStopped)
	f.b.TargetFunc = s.target(true)
	f.b.WakeFunc = s.wake(t, 200*time.Millisecond, true)
	start := time.Now()
	var ok atomic.Int64
	concurrently(8, func(int) {
		resp, err := http.Get(f.pathURL(s.port, "/hello"))
		if err != nil {
			t.Error(err)
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			ok.Add(1)
		} else {
			t.Errorf("status %d, want 200", resp.StatusCode)
		}
	})
	if ok.Load() != 8 {
		t.Fatalf("%d of 8 requests answered", ok.Load())
	}
	if n := s.wakes.Load(); n != 1 {
		t.Errorf("Wake called %d times for 8 concurrent requests, want 1", n)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("answered after %s, before the sandbox woke", d)
	}
	// Now running: no further wake.
	resp, body := get(t, f.pathURL(s.port, "/"), nil)
	decodeEcho(t)(resp, body)
	if n := s.wakes.Load(); n != 1 {
		t.Errorf("Wake called %d times, want 1", n)
	}
}

func TestWakeResumesPausedSandbox(t *testing.T) {
	f := newFixture(t)
	s := newSleepingSandbox(t, statePaused)
	f.b.TargetFunc = s.target(true)
	f.b.WakeFunc = s.wake(t, 50*time.Millisecond, true)
	decodeEcho(t)(get(t, f.pathURL(s.port, "/"), nil))
	if n := s.wakes.Load(); n != 1 {
		t.Errorf("Wake called %d times, want 1", n)
	}
}

func TestNoAutoResumeIs503(t *testing.T) {
	f := newFixture(t)
	for _, state := range []string{stateStopped, statePaused, stateArchived} {
		s := newSleepingSandbox(t, state)
		f.b.TargetFunc = s.target(false)
		f.b.WakeFunc = s.wake(t, 0, true)
		resp, body := get(t, f.pathURL(s.port, "/"), nil)
		p := wantProblem(t, resp, body, http.StatusServiceUnavailable)
		if !strings.Contains(p.Detail, state) || !strings.Contains(p.Detail, "auto_resume") || !strings.Contains(p.Detail, "stead ") {
			t.Errorf("%s: detail %q should say it is %s, how to start it and about auto_resume", state, p.Detail, state)
		}
		if s.wakes.Load() != 0 {
			t.Errorf("%s: woken without auto_resume", state)
		}
	}
}

func TestWakeTimesOutWhenPortNeverOpens(t *testing.T) {
	f := newFixture(t)
	f.p.wakeTimeout = 300 * time.Millisecond
	s := newSleepingSandbox(t, stateStopped)
	f.b.TargetFunc = s.target(true)
	f.b.WakeFunc = s.wake(t, 0, false)
	resp, body := get(t, f.pathURL(s.port, "/"), nil)
	wantProblem(t, resp, body, http.StatusGatewayTimeout)
}

func TestPrivatePortIsNotWokenWithoutCredentials(t *testing.T) {
	f := newFixture(t)
	s := newSleepingSandbox(t, stateStopped)
	target := s.target(true)
	f.b.TargetFunc = func(ctx context.Context, id string, port int) (Target, error) {
		t, err := target(ctx, id, port)
		t.Public = false
		return t, err
	}
	f.b.WakeFunc = s.wake(t, 0, true)
	resp, body := get(t, f.pathURL(s.port, "/"), nil)
	wantProblem(t, resp, body, http.StatusUnauthorized)
	if s.wakes.Load() != 0 {
		t.Error("an unauthenticated request woke a sandbox")
	}
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewRejectsUnknownEndpoints(t *testing.T) {
	for _, ep := range []string{"", "127.0.0.1:7878", "tcp://x", "unix://", "http://"} {
		if _, err := New(ep, "k"); err == nil {
			t.Errorf("New(%q) accepted", ep)
		}
	}
	for _, ep := range []string{"http://127.0.0.1:7878", "https://stead.example/", "unix:///run/stead/stead.sock"} {
		if _, err := New(ep, "k"); err != nil {
			t.Errorf("New(%q): %v", ep, err)
		}
	}
}

// serveUnix serves h on a unix socket in a temp dir and returns its endpoint.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "stead.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "unix://" + sock
}

func TestUnixSocketEndpointSendsKeyAndDecodesJSON(t *testing.T) {
	var gotAuth, gotPath string
	ep := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath = r.Header.Get("Authorization"), r.URL.EscapedPath()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Sandbox{ID: "sb-1", Name: "a b", State: "running"})
	}))
	c, err := New(ep, "secret")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, err := c.GetSandbox(ctx, "a b")
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb-1" || gotAuth != "Bearer secret" || gotPath != "/v1/sandboxes/a%20b" {
		t.Fatalf("sandbox %+v auth %q path %q", sb, gotAuth, gotPath)
	}
}

func TestProblemResponsesBecomeAPIErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"title":"Conflict","status":409,"detail":"start sandbox a: already running","errors":[{"message":"m","location":"body.name"}]}`))
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "k")
	_, err := c.StartSandbox(context.Background(), "a")
	if !IsConflict(err) || IsNotFound(err) {
		t.Fatalf("got %v", err)
	}
	var e *APIError
	if !errors.As(err, &e) || e.Detail != "start sandbox a: already running" || len(e.Errors) != 1 {
		t.Fatalf("error %#v", e)
	}
	if !strings.Contains(err.Error(), "already running") || !strings.Contains(err.Error(), "409") {
		t.Fatalf("message %q", err.Error())
	}
}

func TestNonJSONErrorBodyIsKeptAsDetail(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway from proxy", http.StatusBadGateway)
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "k")
	_, err := c.Info(context.Background())
	if StatusCode(err) != http.StatusBadGateway || !strings.Contains(err.Error(), "proxy") {
		t.Fatalf("got %v", err)
	}
}

func TestReadSSEParsesEventsAndSkipsComments(t *testing.T) {
	in := ": keep-alive\n\nevent: stdout\ndata: {\"a\":1}\n\r\nevent: exit\ndata: x\ndata: y\n\n"
	var got []string
	err := readSSE(strings.NewReader(in), func(name string, data []byte) (bool, error) {
		got = append(got, name+"="+string(data))
		return name == "exit", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "stdout={\"a\":1}|exit=x\ny" {
		t.Fatalf("events %q", got)
	}
	err = readSSE(strings.NewReader("event: stdout\ndata: {}\n\n"), func(string, []byte) (bool, error) { return false, nil })
	if !errors.Is(err, errStreamEnded) {
		t.Fatalf("truncated stream: %v", err)
	}
}

func FuzzReadSSE(f *testing.F) {
	f.Add("event: stdout\ndata: {\"type\":\"stdout\",\"data\":\"aGk=\"}\n\nevent: exit\ndata: {}\n\n")
	f.Add(":\n\n\n\ndata\nevent\n")
	f.Fuzz(func(t *testing.T, s string) {
		_ = readSSE(strings.NewReader(s), func(name string, data []byte) (bool, error) {
			var ev ExecEvent
			_ = json.Unmarshal(data, &ev)
			return false, nil
		})
	})
}

package linux

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/testutil"
)

// TestExpediteRCUTurnsItOnAndSaysSo: the runtime turns expedited RCU
// grace periods on when they are off, and logs the change; when they are
// on it says nothing.
func TestExpediteRCUTurnsItOnAndSaysSo(t *testing.T) {
	testutil.RequireRoot(t)
	was, err := os.ReadFile(rcuExpedited)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(rcuExpedited, was, 0o644) })
	if err := os.WriteFile(rcuExpedited, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	expediteRCU(log)
	if b, _ := os.ReadFile(rcuExpedited); strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("rcu_expedited = %q after the runtime turned it on", b)
	}
	if !strings.Contains(logged.String(), "kernel.rcu_expedited") {
		t.Fatalf("the change was not logged: %q", logged.String())
	}
	logged.Reset()
	expediteRCU(log)
	if logged.Len() != 0 {
		t.Fatalf("logged with nothing to change: %q", logged.String())
	}
}

// TestProcessStartTimeReadsField22: a command with spaces and
// parentheses does not shift the fields.
func TestProcessStartTimeReadsField22(t *testing.T) {
	v, err := processStartTime(os.Getpid())
	if err != nil || v == 0 {
		t.Fatalf("own start time: %d %v", v, err)
	}
	if _, err := processStartTime(-5); err == nil {
		t.Fatal("a bad pid gave a start time")
	}
}

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonSDK runs the Python SDK's test suite (sdk/python/tests, stdlib
// unittest) with the machine's python3 against a live daemon. A missing
// python3 fails the test: CI must not skip the SDK silently. So does a
// skipped Python test, since every live test must have run. Idle policies
// run every second, for the test of E2B's timeout (stead's idle auto-stop).
func TestPythonSDK(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 not found on PATH (%v): the Python SDK tests need it; install python3 >= 3.9", err)
	}
	d := newDaemon(t, "--policy-interval", "1s")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "sdk/python/tests", "-v")
	cmd.Dir = root
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEAD_") && !strings.HasPrefix(kv, "PYTHONPATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"STEAD_ENDPOINT=http://"+d.addr,
		"STEAD_API_KEY="+d.key,
		"PYTHONPATH="+filepath.Join(root, "sdk", "python"),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python SDK tests failed (%v):\n%s", err, out)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("python SDK tests skipped tests against a live daemon:\n%s", out)
	}
	t.Logf("python SDK tests:\n%s", out)
}

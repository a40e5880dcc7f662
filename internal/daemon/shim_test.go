package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestShimBinaryIsRootOwnedAndWritableOnlyByRoot: the daemon runs
// stead-shim beside its binary as root only when that file is root's
// alone; otherwise (or without one) the stead binary plays the shim.
func TestShimBinaryIsRootOwnedAndWritableOnlyByRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (the shim's owner is checked against root)")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	exe := filepath.Join(dir, "stead")
	if got := shimBinary(exe, log); got != exe {
		t.Fatalf("no stead-shim: %s, want the stead binary", got)
	}
	shim := filepath.Join(dir, "stead-shim")
	if err := os.WriteFile(shim, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shimBinary(exe, log); got != shim {
		t.Fatalf("root's stead-shim: %s, want it", got)
	}
	for _, mode := range []os.FileMode{0o775, 0o757} {
		os.Chmod(shim, mode)
		if got := shimBinary(exe, log); got != exe {
			t.Fatalf("stead-shim with mode %o: %s, want the stead binary", mode, got)
		}
	}
	os.Chmod(shim, 0o755)
	if err := os.Chown(shim, 1000, 0); err != nil {
		t.Fatal(err)
	}
	if got := shimBinary(exe, log); got != exe {
		t.Fatalf("stead-shim owned by uid 1000: %s, want the stead binary", got)
	}
}

package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestServeRefusesABadWarmPool: a malformed --warm is a usage error that
// names the flag and the form, before anything starts.
func TestServeRefusesABadWarmPool(t *testing.T) {
	for _, bad := range []string{"host", "host=x", "host=-2", "/host=1", "host=1001"} {
		var stdout, stderr bytes.Buffer
		code := runIO([]string{"serve", "--data-dir", t.TempDir(), "--warm", bad}, strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--warm: warm pool "+strconv.Quote(bad)) {
			t.Errorf("serve --warm %q: exit %d, %q", bad, code, stderr.String())
		}
	}
}

// TestServeRefusesNegativeShells: --shells below 0 is a usage error before
// anything starts.
func TestServeRefusesNegativeShells(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	code := runIO([]string{"serve", "--data-dir", dir, "--shells", "-1"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--shells -1") {
		t.Errorf("serve --shells -1: exit %d, %q", code, stderr.String())
	}
}

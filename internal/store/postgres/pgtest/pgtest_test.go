package pgtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMissingBinariesSayWhatToInstall(t *testing.T) {
	empty := t.TempDir()
	_, err := findBinIn([]string{filepath.Join(empty, "*", "bin")}, func(string) (string, error) { return "", errors.New("not in PATH") })
	if err == nil || !strings.Contains(err.Error(), "apt-get install postgresql") || !strings.Contains(err.Error(), EnvServer) {
		t.Fatalf("error %v: want one saying to install postgresql or set %s", err, EnvServer)
	}
}

func TestFindsNewestInstalledVersion(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"13", "15"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"initdb", "postgres"} {
			if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := findBinIn([]string{filepath.Join(root, "*", "bin")}, func(string) (string, error) { return "", errors.New("not in PATH") })
	if err != nil || got != filepath.Join(root, "15", "bin") {
		t.Fatalf("found %q %v, want version 15's bin", got, err)
	}
}

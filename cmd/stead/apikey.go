package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// defaultDataDir is the daemon's data directory when neither --data-dir
// nor STEAD_DATA_DIR names another.
const defaultDataDir = "/var/lib/stead"

// apiKey is the key the CLI sends and where it came from, so that a
// refused key can be traced to its source.
type apiKey struct {
	// key is the secret ("" when none was found).
	key string
	// from says where key came from: "--api-key", "STEAD_API_KEY" or the
	// path of the admin.key file it was read from.
	from string
	// file is the admin.key file that was looked at (set whenever no key
	// was given by flag or environment).
	file string
	// fileErr is why file could not be read.
	fileErr error
}

// findAPIKey discovers the API key, first found wins:
//
//  1. flagKey (--api-key);
//  2. $STEAD_API_KEY;
//  3. DIR/admin.key, where DIR is flagDataDir (--data-dir), else
//     $STEAD_DATA_DIR, else defaultDir. Only that one file is read: a
//     missing key in the named data directory never falls back to another
//     daemon's key.
func findAPIKey(flagKey, flagDataDir string, getenv func(string) string, defaultDir string) apiKey {
	if flagKey != "" {
		return apiKey{key: flagKey, from: "--api-key"}
	}
	if k := getenv("STEAD_API_KEY"); k != "" {
		return apiKey{key: k, from: "STEAD_API_KEY"}
	}
	dir := flagDataDir
	if dir == "" {
		dir = getenv("STEAD_DATA_DIR")
	}
	if dir == "" {
		dir = defaultDir
	}
	file := filepath.Join(dir, "admin.key")
	b, err := os.ReadFile(file)
	if err != nil {
		return apiKey{file: file, fileErr: err}
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return apiKey{file: file, fileErr: errors.New("the file is empty")}
	}
	return apiKey{key: k, from: file, file: file}
}

// hint says where the key came from and what to do, for a 401.
func (k apiKey) hint() string {
	const other = "set STEAD_API_KEY or --api-key"
	switch {
	case k.from == "--api-key":
		return "the API key came from --api-key"
	case k.from == "STEAD_API_KEY":
		return "the API key came from STEAD_API_KEY (unset it to use the daemon's admin.key, or --api-key)"
	case k.key != "":
		return fmt.Sprintf("the API key was read from %s; %s, or point --data-dir (STEAD_DATA_DIR) at the daemon's data directory", k.file, other)
	case errors.Is(k.fileErr, fs.ErrNotExist):
		return fmt.Sprintf("no API key: %s does not exist; %s, or point --data-dir (STEAD_DATA_DIR) at the daemon's data directory", k.file, other)
	case errors.Is(k.fileErr, fs.ErrPermission):
		return fmt.Sprintf("no API key: %s is readable only by root; %s, or run as root", k.file, other)
	case k.fileErr != nil:
		return fmt.Sprintf("no API key: cannot use %s: %v; %s", k.file, errorsTail(k.fileErr), other)
	}
	return "no API key; " + other
}

// errorsTail is err's text without the path an *fs.PathError repeats.
func errorsTail(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

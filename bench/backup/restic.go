package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
)

// resticPassword is the benchmark repositories' password (they hold
// generated data only and are deleted after the run).
const resticPassword = "stead-bench"

// resticRepo is one restic repository under test.
type resticRepo struct {
	bin   string
	url   string   // a path or s3:http://host:port/bucket
	cache string   // --cache-dir
	env   []string // extra environment (S3 credentials)
}

func (r *resticRepo) run(ctx context.Context, dir string, args ...string) ([]byte, result, error) {
	env := append([]string{"RESTIC_PASSWORD=" + resticPassword}, r.env...)
	args = append([]string{"-r", r.url, "--cache-dir", r.cache}, args...)
	return commandOutput(ctx, dir, env, r.bin, args...)
}

// init creates the repository in format version 2, the one that
// compresses (zstd, mode auto), as stead does.
func (r *resticRepo) init(ctx context.Context) error {
	out, _, err := r.run(ctx, "", "init", "--repository-version", "2")
	if err != nil {
		return fmt.Errorf("restic init %s: %w: %s", r.url, err, tail(out, 2000))
	}
	return nil
}

// backup runs `restic backup .` in src; restic picks the previous snapshot
// of the same host and path as the parent by itself.
func (r *resticRepo) backup(ctx context.Context, src string) (result, error) {
	out, res, err := r.run(ctx, src, "backup", "--json", ".")
	if err != nil {
		return res, fmt.Errorf("%w: %s", err, tail(out, 2000))
	}
	s, err := parseResticSummary(out)
	if err != nil {
		return res, err
	}
	res.note = fmt.Sprintf("new %d, changed %d, unmodified %d files; data_added %s (uncompressed)",
		s.FilesNew, s.FilesChanged, s.FilesUnmodified, human(s.DataAdded))
	return res, nil
}

// restore writes the latest snapshot to dst.
func (r *resticRepo) restore(ctx context.Context, dst string) (result, error) {
	out, res, err := r.run(ctx, "", "restore", "latest", "--target", dst)
	if err != nil {
		return res, fmt.Errorf("%w: %s", err, tail(out, 2000))
	}
	return res, nil
}

// resticSummary is the final line of `restic backup --json` (restic 0.14).
type resticSummary struct {
	MessageType         string  `json:"message_type"`
	FilesNew            int64   `json:"files_new"`
	FilesChanged        int64   `json:"files_changed"`
	FilesUnmodified     int64   `json:"files_unmodified"`
	DataBlobs           int64   `json:"data_blobs"`
	TreeBlobs           int64   `json:"tree_blobs"`
	DataAdded           int64   `json:"data_added"`
	TotalFilesProcessed int64   `json:"total_files_processed"`
	TotalBytesProcessed int64   `json:"total_bytes_processed"`
	TotalDuration       float64 `json:"total_duration"`
	SnapshotID          string  `json:"snapshot_id"`
}

// parseResticSummary finds the summary message in restic's JSON-lines
// output (status lines and anything that is not JSON are skipped). It
// fails with errs.ErrInvalid if there is no summary or it is implausible.
func parseResticSummary(out []byte) (resticSummary, error) {
	var found *resticSummary
	for line := range bytes.SplitSeq(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var s resticSummary
		if json.Unmarshal(line, &s) != nil || s.MessageType != "summary" {
			continue
		}
		found = &s
	}
	if found == nil {
		return resticSummary{}, fmt.Errorf("parse restic backup output: no summary line: %w", errs.ErrInvalid)
	}
	s := *found
	if s.FilesNew < 0 || s.FilesChanged < 0 || s.FilesUnmodified < 0 || s.DataAdded < 0 || s.TotalBytesProcessed < 0 {
		return resticSummary{}, fmt.Errorf("parse restic backup output: negative count in summary: %w", errs.ErrInvalid)
	}
	return s, nil
}

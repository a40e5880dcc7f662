package main

import (
	"errors"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

const resticOutput = `{"message_type":"status","percent_done":0.5,"total_files":390,"files_done":200,"total_bytes":21000000,"bytes_done":10500000}
{"message_type":"status","percent_done":1,"total_files":390,"files_done":390,"total_bytes":21000000,"bytes_done":21000000}
{"message_type":"summary","files_new":0,"files_changed":3,"files_unmodified":387,"dirs_new":0,"dirs_changed":4,"dirs_unmodified":78,"data_blobs":7,"tree_blobs":5,"data_added":2726297,"total_files_processed":390,"total_bytes_processed":21175559,"total_duration":0.81,"snapshot_id":"4e6e38bd"}
`

func TestParseResticSummaryPicksTheSummaryLine(t *testing.T) {
	s, err := parseResticSummary([]byte("using parent snapshot 61d984a9\n" + resticOutput))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if s.FilesChanged != 3 || s.FilesUnmodified != 387 || s.DataAdded != 2726297 || s.SnapshotID != "4e6e38bd" {
		t.Fatalf("summary = %+v", s)
	}
}

func TestParseResticSummaryRejectsOutputWithoutSummary(t *testing.T) {
	for name, out := range map[string]string{
		"empty":       "",
		"status only": `{"message_type":"status","percent_done":1}`,
		"not json":    "Fatal: unable to open repository\n",
		"truncated":   `{"message_type":"summary","files_new":`,
		"negative":    `{"message_type":"summary","data_added":-5}`,
	} {
		if _, err := parseResticSummary([]byte(out)); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func FuzzParseResticSummary(f *testing.F) {
	f.Add([]byte(resticOutput))
	f.Add([]byte(`{"message_type":"summary"}`))
	f.Add([]byte("{\n{\"message_type\":\"summary\",\"files_new\":1e3}\n"))
	f.Add([]byte(`{"message_type":"summary","data_added":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		s, err := parseResticSummary(out)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if s.MessageType != "summary" || s.DataAdded < 0 || s.FilesNew < 0 || s.FilesChanged < 0 {
			t.Fatalf("accepted implausible summary %+v", s)
		}
	})
}

package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestExecOutputIsTextWithBase64OnlyForBytesThatAreNot(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stdout     []byte
		wantText   string
		wantBase64 bool
	}{
		{"ascii", []byte("hello\n"), "hello\n", false},
		{"utf-8", []byte("héllo wörld ✓\n"), "héllo wörld ✓\n", false},
		{"empty", nil, "", false},
		{"binary", []byte{'a', 0xff, 'b'}, "a\uFFFDb", true},
		{"cut character", []byte("caf\xc3"), "caf\uFFFD", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(ExecResult{ExitCode: 3, Stdout: tc.stdout, Stderr: []byte("e")})
			if err != nil {
				t.Fatal(err)
			}
			var wire map[string]any
			if err := json.Unmarshal(raw, &wire); err != nil {
				t.Fatal(err)
			}
			if wire["stdout"] != tc.wantText || wire["stderr"] != "e" {
				t.Fatalf("wire %s", raw)
			}
			if _, has := wire["stdout_base64"]; has != tc.wantBase64 {
				t.Fatalf("stdout_base64 present %v, want %v: %s", has, tc.wantBase64, raw)
			}
			var back ExecResult
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Stdout, tc.stdout) || back.ExitCode != 3 || string(back.Stderr) != "e" {
				t.Fatalf("round trip %+v", back)
			}
		})
	}
}

func TestExecResultRefusesBadBase64(t *testing.T) {
	var r ExecResult
	err := json.Unmarshal([]byte(`{"exit_code":0,"stdout":"x","stdout_base64":"!!","stderr":""}`), &r)
	if err == nil || !strings.Contains(err.Error(), "stdout_base64") {
		t.Fatalf("err %v", err)
	}
}

func FuzzExecJSONRoundTrip(f *testing.F) {
	f.Add([]byte("hello\n"), []byte{0xff, 0xfe})
	f.Add([]byte("caf\xc3"), []byte("é"))
	f.Add([]byte{}, []byte(nil))
	f.Fuzz(func(t *testing.T, stdout, data []byte) {
		raw, err := json.Marshal(ExecResult{Stdout: stdout, Stderr: data})
		if err != nil {
			t.Fatal(err)
		}
		var r ExecResult
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Stdout, stdout) || !bytes.Equal(r.Stderr, data) {
			t.Fatalf("round trip of %q %q: %q %q", stdout, data, r.Stdout, r.Stderr)
		}
		raw, err = json.Marshal(ExecEvent{Type: "stdout", Data: data})
		if err != nil {
			t.Fatal(err)
		}
		var e ExecEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Data, data) {
			t.Fatalf("event round trip of %q: %q", data, e.Data)
		}
		// Any input decodes or fails cleanly.
		_ = json.Unmarshal(stdout, &r)
		_ = json.Unmarshal(stdout, &e)
	})
}

package envd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, 0, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&buf, FlagEndStream, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	f, p, err := ReadFrame(&buf, 100)
	if err != nil || f != 0 || string(p) != `{"a":1}` {
		t.Fatalf("first frame: %v %q %v", f, p, err)
	}
	f, p, err = ReadFrame(&buf, 100)
	if err != nil || f != FlagEndStream || string(p) != `{}` {
		t.Fatalf("second frame: %v %q %v", f, p, err)
	}
	if _, _, err = ReadFrame(&buf, 100); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

func TestReadFrameRefusesOversizedTruncatedAndCompressed(t *testing.T) {
	for name, in := range map[string][]byte{
		"oversized":  {0, 0, 0, 1, 0},
		"truncated":  {0, 0, 0, 0, 5, '{'},
		"short":      {0, 0},
		"compressed": {FlagCompressed, 0, 0, 0, 0},
	} {
		if _, _, err := ReadFrame(bytes.NewReader(in), 100); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
}

func TestStartRequestDecodesTheSDKForm(t *testing.T) {
	var req StartRequest
	in := `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"b"},"cwd":"/tmp"},"stdin":false}`
	if err := DecodeRequest([]byte(in), &req); err != nil {
		t.Fatal(err)
	}
	if req.Process.Cmd != "/bin/bash" || len(req.Process.Args) != 3 || req.Process.Envs["A"] != "b" || *req.Process.Cwd != "/tmp" || *req.Stdin {
		t.Fatalf("decoded %+v", req.Process)
	}
	var sig SendSignalRequest
	if err := DecodeRequest([]byte(`{"process":{"pid":"12"},"signal":"SIGNAL_SIGKILL"}`), &sig); err != nil {
		t.Fatal(err)
	}
	if *sig.Process.Pid != 12 || sig.Signal != SignalSIGKILL {
		t.Fatalf("decoded %+v", sig)
	}
	var si SendInputRequest
	if err := DecodeRequest([]byte(`{"process":{"pid":4},"input":{"pty":"bHMK"}}`), &si); err != nil || *si.Process.Pid != 4 || string(si.Input.PTY) != "ls\n" {
		t.Fatalf("decoded %+v %v", si, err)
	}
	if err := DecodeRequest([]byte(`{"path":"/a"} {}`), &PathRequest{}); err == nil {
		t.Fatal("trailing data accepted")
	}
}

func TestEventsEncodeAsProtobufJSON(t *testing.T) {
	b, _ := json.Marshal(StreamResponse{Event: ProcessEvent{Data: &DataEvent{Stdout: []byte("hi")}}})
	if string(b) != `{"event":{"data":{"stdout":"aGk="}}}` {
		t.Fatalf("data event: %s", b)
	}
	b, _ = json.Marshal(EntryInfo{Size: 12})
	if !bytes.Contains(b, []byte(`"size":"12"`)) {
		t.Fatalf("int64 size not a string: %s", b)
	}
}

// FuzzReadFrame: no input makes the envelope reader panic or return a
// payload larger than its cap.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{2, 0, 0, 0, 0})
	f.Add([]byte{1, 255, 255, 255, 255})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			_, p, err := ReadFrame(r, 64)
			if err != nil {
				return
			}
			if len(p) > 64 {
				t.Fatalf("payload of %d bytes over the cap", len(p))
			}
		}
	})
}

// FuzzDecodeRequest: no input makes the request decoders panic.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"process":{"cmd":"/bin/bash","args":["-c","x"],"envs":{"A":"b"}}}`))
	f.Add([]byte(`{"process":{"pid":"7"},"signal":9}`))
	f.Add([]byte(`{"path":"/a","depth":"3"}`))
	f.Add([]byte(`{"pty":{"size":{"cols":80,"rows":24}}}`))
	f.Add([]byte(`{"process":{"pid":3},"input":{"stdin":"aGk="}}`))
	f.Add([]byte(`{"process":{"tag":"t"},"pty":{"size":{"cols":"100","rows":30}}}`))
	f.Add([]byte(`{"path":"/home/user","recursive":true,"includeEntry":false}`))
	f.Add([]byte(`{"watcherId":"w-1"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		DecodeRequest(in, &StartRequest{})
		DecodeRequest(in, &SendSignalRequest{})
		DecodeRequest(in, &ListDirRequest{})
		DecodeRequest(in, &MoveRequest{})
		DecodeRequest(in, &SendInputRequest{})
		DecodeRequest(in, &UpdateRequest{})
		DecodeRequest(in, &CloseStdinRequest{})
		DecodeRequest(in, &WatchDirRequest{})
		DecodeRequest(in, &WatcherRequest{})
	})
}

package sandbox

import (
	"errors"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

func TestLogConfigDefaultsAndLimits(t *testing.T) {
	keep := func(n int) *int { return &n }
	for _, c := range []struct {
		in      *client.LogConfig
		size    int64
		keep    int
		invalid bool
	}{
		{nil, 64 << 20, 4, false},
		{&client.LogConfig{MaxSize: "16MiB"}, 16 << 20, 4, false},
		{&client.LogConfig{Keep: keep(0)}, 64 << 20, 0, false},
		{&client.LogConfig{MaxSize: "1M", Keep: keep(100)}, 1 << 20, 100, false},
		{&client.LogConfig{MaxSize: "512KiB"}, 0, 0, true},
		{&client.LogConfig{Keep: keep(101)}, 0, 0, true},
		{&client.LogConfig{Keep: keep(-1)}, 0, 0, true},
		{&client.LogConfig{MaxSize: "lots"}, 0, 0, true},
	} {
		got, err := logConfig(c.in)
		if c.invalid {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Errorf("%+v: err %v, want invalid", c.in, err)
			}
			continue
		}
		if err != nil || got.MaxSize != c.size || got.Keep != c.keep {
			t.Errorf("%+v: %+v, %v", c.in, got, err)
		}
	}
	if v := logView(nil); v.MaxSize != "64MiB" || *v.Keep != 4 {
		t.Errorf("default view %+v", v)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if got, err := parseSince("10m", now); err != nil || !got.Equal(now.Add(-10*time.Minute)) {
		t.Errorf("10m: %v %v", got, err)
	}
	if got, err := parseSince("2026-12-02T09:00:00Z", now); err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Errorf("RFC 3339: %v %v", got, err)
	}
	if got, err := parseSince("", now); err != nil || !got.IsZero() {
		t.Errorf("empty: %v %v", got, err)
	}
	for _, s := range []string{"-5m", "yesterday", "2026-12-02"} {
		if _, err := parseSince(s, now); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

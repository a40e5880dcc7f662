package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
)

type infoBackend struct {
	cliBackend
	info client.Info
}

func (b *infoBackend) Info(context.Context) client.Info { return b.info }

func TestInfoShowsThePoolFillLevel(t *testing.T) {
	for _, c := range []struct {
		name string
		cap  client.PoolCapacity
		want []string
	}{
		{"btrfs nearly full", client.PoolCapacity{SizeBytes: 30 << 30, UsedBytes: 26 << 30, ReserveBytes: 3 << 30, UsableBytes: 27 << 30,
			DatasetsBytes: 24 << 30, Enforced: true, CommittedBytes: 40 << 30, CommitLimitBytes: 54 << 30, Overcommit: 2, Fill: 24.0 / 27},
			[]string{"Pool fill:", "89%: 24 GiB of 27 GiB held by sandboxes", "nearly full", "Pool committed:", "40 GiB of 54 GiB (2 x 27 GiB usable; size 30 GiB less a 3.0 GiB reserve)"}},
		{"full", client.PoolCapacity{SizeBytes: 2 << 30, UsedBytes: 2 << 30, ReserveBytes: 512 << 20, UsableBytes: 1536 << 20,
			DatasetsBytes: 1536 << 20, Enforced: true, Overcommit: 1, Fill: 1},
			[]string{"100%", "FULL: writes in sandboxes fail"}},
		{"dir pool", client.PoolCapacity{SizeBytes: 100 << 30, UsedBytes: 10 << 30, ReserveBytes: 10 << 30, UsableBytes: 90 << 30,
			DatasetsBytes: -1, Overcommit: 2, Fill: 0.1},
			[]string{"10%: 10 GiB of 100 GiB used on its file system (disk quotas not enforced)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &infoBackend{info: client.Info{Version: "v", Pool: "btrfs", PoolCapacity: &c.cap}}
			srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
			t.Cleanup(srv.Close)
			code, out, errOut := stead(t, srv, "info")
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("info output lacks %q:\n%s", w, out)
				}
			}
			code, out, _ = stead(t, srv, "info", "--json")
			if code != exitOK || !strings.Contains(out, `"pool_capacity"`) || !strings.Contains(out, `"committed_bytes"`) {
				t.Fatalf("info --json: %d %s", code, out)
			}
		})
	}
}

package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/network"
	"github.com/stead-dev/stead/internal/store"
)

// volumesFail is a store whose volume list fails (the fault injected).
type volumesFail struct{ store.Store }

func (volumesFail) ListVolumes(context.Context, string, bool) ([]store.Volume, error) {
	return nil, errors.New("injected: the volume list failed")
}

// syncSeen records the network's Sync (the one method a Reconcile with
// no sandboxes calls).
type syncSeen struct {
	Network
	synced bool
}

func (n *syncSeen) Sync(context.Context, []network.Attachment, map[string]bool) error {
	n.synced = true
	return nil
}

// TestReconcileSyncsTheNetworkWhenACleanupFails: a cleanup of leftovers
// that fails at start-up does not keep the network's Sync from running
// (it is what gives running sandboxes their rules; an earlier version's
// bridged sandboxes reach nothing until it has), and the failure is still
// reported.
func TestReconcileSyncsTheNetworkWhenACleanupFails(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	n := &syncSeen{}
	s := serviceOn(t, volumesFail{openStore(t, base)}, base, Options{Net: &NetworkOptions{Manager: n}})
	err := s.Reconcile(ctx)
	if err == nil || !strings.Contains(err.Error(), "volume leftovers") {
		t.Fatalf("Reconcile = %v, want the volume cleanup's failure", err)
	}
	if !n.synced {
		t.Fatal("the network was not synced after a cleanup failed")
	}
}

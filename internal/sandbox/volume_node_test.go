package sandbox

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// TestVolumeRecordsItsNodeAndOnlyThatNodeCountsIt: in a cluster a volume's
// record names the node whose pool holds its data (what the cluster
// forwards its routes to and places its sandboxes by); that node's disk
// admission counts its quota, another node's does not. A single node
// records none.
func TestVolumeRecordsItsNodeAndOnlyThatNodeCountsIt(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n1 := newNodeService(t, st, nodeLeases(t, st, "n1"))
	n2 := newNodeService(t, st, nodeLeases(t, st, "n2"))
	v, err := n1.CreateVolume(ctx, store.DefaultTenant, client.CreateVolumeRequest{Name: "data", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetVolume(ctx, store.DefaultTenant, v.ID)
	if err != nil || rec.Node != "n1" {
		t.Fatalf("volume record %+v, %v: want node n1", rec, err)
	}
	if _, vols, err := n1.committedDisk(ctx); err != nil || vols != 64<<20 {
		t.Fatalf("n1 counts %d bytes of volumes (%v), want its volume's 64 MiB", vols, err)
	}
	if _, vols, err := n2.committedDisk(ctx); err != nil || vols != 0 {
		t.Fatalf("n2 counts %d bytes of volumes (%v), want none: the volume is in n1's pool", vols, err)
	}
	single := serviceOn(t, st, t.TempDir(), Options{})
	sv, err := single.CreateVolume(ctx, store.DefaultTenant, client.CreateVolumeRequest{Name: "solo", SizeBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.GetVolume(ctx, store.DefaultTenant, sv.ID); rec.Node != "" || !n2.volumeHere(rec) {
		t.Fatalf("a single node's volume %+v: want no node, counted by every node", rec)
	}
}

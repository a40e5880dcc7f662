package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const gib = int64(1) << 30

func TestPickPlacesOnTheLeastLoadedNodeWithRoom(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	grace := 30 * time.Second
	node := func(name string, cpus float64, memGiB, freeGiB int64) store.Node {
		return store.Node{Name: name, Address: name + ":7879", CPUs: cpus, MemoryBytes: memGiB * gib, PoolFreeBytes: freeGiB * gib,
			State: store.NodeActive, HeartbeatAt: now.Add(-5 * time.Second)}
	}
	with := func(n store.Node, f func(*store.Node)) store.Node { f(&n); return n }
	small := Need{CPUs: 1, MemoryBytes: 2 * gib, DiskBytes: 10 * gib}
	exact := Policy{Now: now, Grace: grace, CPUOvercommit: 1, MemoryOvercommit: 1, DiskOvercommit: 1}
	cases := []struct {
		name    string
		nodes   []store.Node
		load    map[string]Load
		need    Need
		policy  Policy
		exclude []string
		want    string
		// wantErr: the reasons a NoRoomError must give, in order
		wantErr []string
	}{
		{name: "the only node with room", need: small, policy: exact,
			nodes: []store.Node{node("a", 2, 4, 100), node("b", 8, 32, 100)},
			load:  map[string]Load{"a": {Sandboxes: 2, CPUs: 1.5, MemoryBytes: 1 * gib}},
			want:  "b"},
		{name: "least loaded by its larger share", need: small, policy: exact,
			nodes: []store.Node{node("a", 4, 8, 100), node("b", 4, 8, 100)},
			// a: cpu (1+1)/4 = 0.5, memory (1+2)/8; b: cpu 1/4, memory (4+2)/8 = 0.75
			load: map[string]Load{"a": {Sandboxes: 1, CPUs: 1, MemoryBytes: 1 * gib}, "b": {Sandboxes: 1, MemoryBytes: 4 * gib}},
			want: "a"},
		{name: "a bigger node is less loaded by the same sandboxes", need: small, policy: exact,
			nodes: []store.Node{node("a", 2, 4, 100), node("b", 8, 16, 100)},
			load:  map[string]Load{"a": {Sandboxes: 1, CPUs: 0.5, MemoryBytes: 512 << 20}, "b": {Sandboxes: 1, CPUs: 0.5, MemoryBytes: 512 << 20}},
			want:  "b"},
		{name: "tie: fewer sandboxes", need: small, policy: exact,
			nodes: []store.Node{node("a", 4, 8, 100), node("b", 4, 8, 100)},
			load:  map[string]Load{"a": {Sandboxes: 3}, "b": {Sandboxes: 1}},
			want:  "b"},
		{name: "tie: more pool free", need: small, policy: exact,
			nodes: []store.Node{node("a", 4, 8, 50), node("b", 4, 8, 60)},
			want:  "b"},
		{name: "tie: by name", need: small, policy: exact,
			nodes: []store.Node{node("b", 4, 8, 50), node("a", 4, 8, 50)},
			want:  "a"},
		{name: "cordoned, draining, dead and excluded nodes take nothing", need: small, policy: exact,
			nodes: []store.Node{
				with(node("a", 64, 256, 1000), func(n *store.Node) { n.State = store.NodeCordoned }),
				with(node("b", 64, 256, 1000), func(n *store.Node) { n.State = store.NodeDraining }),
				with(node("c", 64, 256, 1000), func(n *store.Node) { n.HeartbeatAt = now.Add(-31 * time.Second) }),
				node("d", 64, 256, 1000),
				node("e", 1, 2, 10),
			},
			exclude: []string{"d"},
			want:    "e"},
		{name: "a heartbeat exactly at the grace is alive", need: small, policy: exact,
			nodes: []store.Node{with(node("a", 4, 8, 100), func(n *store.Node) { n.HeartbeatAt = now.Add(-grace) })},
			want:  "a"},
		{name: "fits exactly", need: Need{CPUs: 0.5, MemoryBytes: 512 << 20, DiskBytes: 5 * gib}, policy: exact,
			nodes: []store.Node{node("a", 2, 4, 5)},
			load:  map[string]Load{"a": {Sandboxes: 3, CPUs: 1.5, MemoryBytes: 4*gib - 512<<20}},
			want:  "a"},
		{name: "overcommit ratios make room", need: small,
			policy: Policy{Now: now, Grace: grace}, // defaults: cpu x4, memory x1, disk x2
			nodes:  []store.Node{node("a", 2, 8, 5)},
			load:   map[string]Load{"a": {Sandboxes: 7, CPUs: 7, MemoryBytes: 6 * gib}},
			want:   "a"},
		{name: "nothing fits: each node says what it lacks", need: small, policy: exact,
			nodes: []store.Node{
				node("a", 2, 4, 100),
				node("b", 8, 32, 4),
				with(node("c", 8, 32, 100), func(n *store.Node) { n.State = store.NodeCordoned }),
				with(node("d", 8, 32, 100), func(n *store.Node) { n.HeartbeatAt = now.Add(-time.Minute) }),
				node("e", 8, 1, 100),
			},
			load: map[string]Load{"a": {Sandboxes: 2, CPUs: 1.5, MemoryBytes: 3 * gib}},
			wantErr: []string{"a: 0.5 of 2 cpus free, 1.0 GiB of 4.0 GiB memory free", "b: 4.0 GiB pool free, 10.0 GiB needed",
				"c: cordoned", "d: no heartbeat for 1m0s (grace 30s)", "e: 1.0 GiB of 1.0 GiB memory free"}},
		{name: "no nodes", need: small, policy: exact, wantErr: []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Pick(tc.nodes, tc.load, tc.need, tc.policy, tc.exclude...)
			if tc.wantErr != nil {
				var nr *NoRoomError
				if !errors.As(err, &nr) || !errors.Is(err, errs.ErrConflict) {
					t.Fatalf("Pick = %s, %v; want a NoRoomError", got.Name, err)
				}
				if strings.Join(nr.Reasons, "; ") != strings.Join(tc.wantErr, "; ") {
					t.Fatalf("reasons\n %q\nwant\n %q", nr.Reasons, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "1 cpus, 2.0 GiB memory, 10.0 GiB disk") {
					t.Fatalf("message %q does not say what is needed", err)
				}
				return
			}
			if err != nil || got.Name != tc.want {
				t.Fatalf("Pick = %q, %v; want %q", got.Name, err, tc.want)
			}
		})
	}
}

func TestLoadsCountRunningSandboxesLimitsOnTheirOwners(t *testing.T) {
	spec := func(cpus float64, mem int64) []byte {
		return fmt.Appendf(nil, `{"instance_type":"x","limits":{"cpus":%g,"memory_bytes":%d,"pids":10,"disk_bytes":1}}`, cpus, mem)
	}
	sbs := []store.Sandbox{
		{ID: "sb-run", State: store.StateRunning, Spec: spec(1, gib)},
		{ID: "sb-paused", State: store.StatePaused, Spec: spec(0.5, 2*gib)},
		{ID: "sb-stopped", State: store.StateStopped, Spec: spec(4, 8*gib)},
		{ID: "sb-other", State: store.StateRunning, Spec: spec(2, 4*gib)},
		{ID: "sb-deleted", State: store.StateDeleted, Spec: spec(2, 4*gib)},
	}
	owners := []store.Ownership{
		{SandboxID: "sb-run", Node: "a"}, {SandboxID: "sb-paused", Node: "a"}, {SandboxID: "sb-stopped", Node: "a"},
		{SandboxID: "sb-other", Node: "b"}, {SandboxID: "sb-deleted", Node: "b"}, {SandboxID: "sb-gone", Node: "b"},
	}
	got := Loads(owners, sbs)
	want := map[string]Load{"a": {Sandboxes: 3, CPUs: 1.5, MemoryBytes: 3 * gib}, "b": {Sandboxes: 1, CPUs: 2, MemoryBytes: 4 * gib}}
	if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
		t.Fatalf("Loads = %+v, want %+v", got, want)
	}
}

func TestInstanceTypeNeedTakesTheDiskOverride(t *testing.T) {
	types := []client.InstanceType{
		{Name: "small", Limits: client.Limits{CPUs: 1, MemoryBytes: 2 * gib, DiskBytes: 10 * gib}},
		{Name: "large", Limits: client.Limits{CPUs: 4, MemoryBytes: 8 * gib, DiskBytes: 40 * gib}},
	}
	if n, err := InstanceTypeNeed(types, "small", "", 0); err != nil || n != (Need{CPUs: 1, MemoryBytes: 2 * gib, DiskBytes: 10 * gib}) {
		t.Fatalf("default: %+v, %v", n, err)
	}
	if n, err := InstanceTypeNeed(types, "small", "large", 3*gib); err != nil || n != (Need{CPUs: 4, MemoryBytes: 8 * gib, DiskBytes: 3 * gib}) {
		t.Fatalf("large with 3 GiB disk: %+v, %v", n, err)
	}
	if _, err := InstanceTypeNeed(types, "small", "huge", 0); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("unknown type: %v", err)
	}
}

func TestPickSendsASandboxOnlyWhereItsTemplateIs(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	node := func(name string, cpus float64, tmpls ...string) store.Node {
		return store.Node{Name: name, CPUs: cpus, MemoryBytes: 64 * gib, PoolFreeBytes: 1000 * gib,
			State: store.NodeActive, HeartbeatAt: now, Templates: tmpls}
	}
	need := Need{CPUs: 2, MemoryBytes: gib, DiskBytes: gib, Template: "alpine", TemplateDataset: "t0123456789abcdef-alpine"}
	p := Policy{Now: now, Grace: time.Minute, CPUOvercommit: 1}
	// The emptiest node lacks it: the one that has it takes the sandbox.
	nodes := []store.Node{node("a", 64, "host"), node("b", 4, "host", "t0123456789abcdef-alpine"), node("c", 64, "alpine")}
	if got, err := Pick(nodes, nil, need, p); err != nil || got.Name != "b" {
		t.Fatalf("Pick = %q, %v; want b, the only node with the template", got.Name, err)
	}
	// The host template (no Template in the need) goes anywhere.
	if got, err := Pick(nodes, nil, Need{CPUs: 2, MemoryBytes: gib}, p); err != nil || got.Name != "a" {
		t.Fatalf("Pick without a template = %q, %v; want a", got.Name, err)
	}
	// The node with the template is full: a 409 naming the template and
	// what each node lacks.
	load := map[string]Load{"b": {Sandboxes: 2, CPUs: 3}}
	_, err := Pick(nodes, load, need, p)
	var nr *NoRoomError
	if !errors.As(err, &nr) || !errors.Is(err, errs.ErrConflict) || !nr.NoTemplate {
		t.Fatalf("Pick with the template's node full = %v; want a NoRoomError for the template", err)
	}
	for _, want := range []string{"no node with room has template alpine", "a: template alpine is not in its pool",
		"b: 1 of 4 cpus free", "c: template alpine is not in its pool", "stead template create"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// Short of room everywhere: the message is about room, as before.
	_, err = Pick([]store.Node{node("b", 4, "t0123456789abcdef-alpine")}, load, need, p)
	if !errors.As(err, &nr) || nr.NoTemplate || !strings.Contains(err.Error(), "no node has room") {
		t.Fatalf("Pick with no room = %v", err)
	}

	// Failover and evacuate prefer the template and do without it.
	pref := p
	pref.TemplatePreferred = true
	if got, err := Pick(nodes, nil, need, pref); err != nil || got.Name != "b" {
		t.Fatalf("preferred: Pick = %q, %v; want b", got.Name, err)
	}
	if got, err := Pick(nodes, load, need, pref); err != nil || got.Name != "a" {
		t.Fatalf("preferred with b full: Pick = %q, %v; want a", got.Name, err)
	}
}

func TestTemplateNeedOnlyConstrainsImportedTemplates(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	for _, tm := range []store.Template{
		{ID: "host", TenantID: store.DefaultTenant, Kind: "host", Source: "host", CreatedAt: time.Now()},
		{ID: "alpine", TenantID: store.DefaultTenant, Kind: "oci", Source: "docker.io/library/alpine", CreatedAt: time.Now()},
	} {
		if err := st.CreateTemplate(ctx, tm); err != nil {
			t.Fatal(err)
		}
	}
	base := Need{CPUs: 1}
	for _, tc := range []struct{ id, want, ds string }{{"", "", ""}, {"host", "", ""}, {"alpine", "alpine", "alpine"}, {"nope", "", ""}} {
		got, err := TemplateNeed(ctx, st, store.DefaultTenant, tc.id, base)
		if err != nil || got.Template != tc.want || got.TemplateDataset != tc.ds || got.CPUs != 1 {
			t.Errorf("TemplateNeed(%q) = %+v, %v; want template %q", tc.id, got, err, tc.want)
		}
	}
	if ds := TemplateDataset("acme", "alpine"); !strings.HasPrefix(ds, "t") || !strings.HasSuffix(ds, "-alpine") || len(ds) != len("t0123456789abcdef-alpine") {
		t.Errorf("TemplateDataset of another tenant = %q", ds)
	}
}

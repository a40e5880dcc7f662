package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Placement.
//
// A sandbox goes to an active node alive within the grace that has room
// for it; among those, to the least loaded. Room is counted from the node's
// last heartbeat:
//
//   - cpus: the node's cpus times Policy.CPUOvercommit, less the cpu limits
//     of the sandboxes it runs (running, paused or being created, by its
//     leases);
//   - memory: the node's memory times Policy.MemoryOvercommit, less their
//     memory limits;
//   - disk: the free space of the node's pool, which already excludes what
//     its sandboxes wrote, must hold the sandbox's disk quota divided by
//     Policy.DiskOvercommit (a quota is a promise, not a reservation; the
//     node's own admission, sandbox/capacity.go, then decides exactly).
//
// Least loaded is the lowest share of its (overcommitted) cpus or memory,
// whichever is higher, taken once the sandbox is added; then the fewest
// sandboxes; then the most pool free; then the name (so a pick is
// deterministic). Pick is pure: the failover coordinator calls it with the
// loads it read and the lapsed node excluded.

// Default overcommit ratios (Policy), those of OpenStack Nova's initial
// allocation ratios for cpu (4) and memory (1), and of the node's own disk
// admission (sandbox.DefaultPoolOvercommit, 2).
const (
	DefaultCPUOvercommit    = 4.0
	DefaultMemoryOvercommit = 1.0
	DefaultDiskOvercommit   = 2.0
)

// Need is what a sandbox takes from the node it runs on.
type Need struct {
	CPUs        float64
	MemoryBytes int64
	DiskBytes   int64
	// Template is the sandbox's template when only a node that has it in
	// its pool can take the sandbox (TemplateNeed sets it): "" when any
	// node can, as for the host template, which each node builds from its
	// own host. TemplateDataset is its dataset id, as nodes report their
	// templates (store.Node.Templates).
	Template, TemplateDataset string
}

// String reads "2 cpus, 4.0 GiB memory, 20.0 GiB disk" (and ", template
// alpine" when it needs one).
func (n Need) String() string {
	s := fmt.Sprintf("%g cpus, %s memory, %s disk", n.CPUs, formatBytes(n.MemoryBytes), formatBytes(n.DiskBytes))
	if n.Template != "" {
		s += ", template " + n.Template
	}
	return s
}

// TemplateDataset is the dataset id, in a node's pool, of tenant's
// template id: the id itself for the default tenant's, t<16 hex digits of
// the tenant's hash>-<id> for another tenant's (the sandbox service names
// template datasets with it).
func TemplateDataset(tenant, id string) string {
	if tenant == store.DefaultTenant {
		return id
	}
	h := sha256.Sum256([]byte(tenant))
	return "t" + hex.EncodeToString(h[:8]) + "-" + id
}

// TemplateGetter reads a template record (store.Store does).
type TemplateGetter interface {
	GetTemplate(ctx context.Context, tenant, id string) (store.Template, error)
}

// TemplateNeed returns need with tenant's template id ("" is "host") set
// when only a node that has it can take the sandbox: an imported template
// is on the nodes that imported it, while the host template is built by
// each node from its own host, and a template the store does not know
// leaves need as it is (the node the create lands on refuses it).
func TemplateNeed(ctx context.Context, st TemplateGetter, tenant, id string, need Need) (Need, error) {
	if id == "" {
		id = "host"
	}
	t, err := st.GetTemplate(ctx, tenant, id)
	if errors.Is(err, errs.ErrNotFound) {
		return need, nil
	}
	if err != nil {
		return need, fmt.Errorf("read template %s: %w", id, err)
	}
	if t.Kind == "host" {
		return need, nil
	}
	need.Template, need.TemplateDataset = t.ID, TemplateDataset(t.TenantID, t.ID)
	return need, nil
}

// Load is what a node's sandboxes take already.
type Load struct {
	// Sandboxes counts the sandboxes the node owns (any state).
	Sandboxes int
	// CPUs and MemoryBytes sum the limits of those it runs (running,
	// paused or being created).
	CPUs        float64
	MemoryBytes int64
}

// Policy is how Pick counts room.
type Policy struct {
	// Now is the time the heartbeats are judged at.
	Now time.Time
	// Grace is how old a heartbeat may be for its node to be alive.
	Grace time.Duration
	// CPUOvercommit, MemoryOvercommit and DiskOvercommit are the ratios
	// above (0: the defaults).
	CPUOvercommit, MemoryOvercommit, DiskOvercommit float64
	// TemplatePreferred makes a Need's template a preference, not a
	// requirement: a node with room that has it goes first, and one
	// without it takes the sandbox when no such node has room. For
	// failover and evacuate: an adoption restores the whole root from a
	// push and never reads the template's files.
	TemplatePreferred bool
}

// ratio returns r, or def for an unset or unusable r.
func ratio(r, def float64) float64 {
	if r > 0 && !math.IsInf(r, 0) && !math.IsNaN(r) {
		return r
	}
	return def
}

// NoRoomError is a placement that found no node with room; it wraps
// errs.ErrConflict (the same class as a full pool on one node).
type NoRoomError struct {
	// Need is what the sandbox needs.
	Need Need
	// Reasons say, per node considered, why it does not fit (by name).
	Reasons []string
	// NoTemplate is set when a node had room but not the template.
	NoTemplate bool
}

// Error says what is short on each node.
func (e *NoRoomError) Error() string {
	if len(e.Reasons) == 0 {
		return fmt.Sprintf("no node to place a sandbox of %s on: no node is registered", e.Need)
	}
	if e.NoTemplate {
		return fmt.Sprintf("no node with room has template %s for a sandbox of %s: %s; import the template on a node with room (stead template create, there), free room, or add a node",
			e.Need.Template, e.Need, strings.Join(e.Reasons, "; "))
	}
	return fmt.Sprintf("no node has room for a sandbox of %s: %s; free room (stop or delete sandboxes), uncordon a node, or add one",
		e.Need, strings.Join(e.Reasons, "; "))
}

// Unwrap makes a NoRoomError an errs.ErrConflict.
func (e *NoRoomError) Unwrap() error { return errs.ErrConflict }

// Pick returns the node that takes a sandbox of need: among nodes that are
// active, alive at p.Now within p.Grace, not excluded, with room given
// their load (by node name; a node without one runs nothing) and with
// need's template in their pools (unless p.TemplatePreferred: then those
// with it first), the least loaded (see above). No such node is a *NoRoomError naming, for each
// node, what it lacks.
func Pick(nodes []store.Node, load map[string]Load, need Need, p Policy, exclude ...string) (store.Node, error) {
	cpuR := ratio(p.CPUOvercommit, DefaultCPUOvercommit)
	memR := ratio(p.MemoryOvercommit, DefaultMemoryOvercommit)
	diskR := ratio(p.DiskOvercommit, DefaultDiskOvercommit)
	type cand struct {
		n     store.Node
		share float64
		count int
		tmpl  bool
	}
	var (
		best       *cand
		reasons    []string
		noTemplate bool
	)
	for _, n := range nodes {
		if slices.Contains(exclude, n.Name) {
			reasons = append(reasons, n.Name+": excluded")
			continue
		}
		if n.State != store.NodeActive {
			reasons = append(reasons, n.Name+": "+n.State)
			continue
		}
		if age := p.Now.Sub(n.HeartbeatAt); age > p.Grace {
			reasons = append(reasons, fmt.Sprintf("%s: no heartbeat for %s (grace %s)", n.Name, age.Round(time.Second), p.Grace))
			continue
		}
		l := load[n.Name]
		cpuCap, memCap := n.CPUs*cpuR, float64(n.MemoryBytes)*memR
		cpuFree, memFree := cpuCap-l.CPUs, memCap-float64(l.MemoryBytes)
		diskNeed := float64(need.DiskBytes) / diskR
		var short []string
		if need.CPUs > cpuFree+1e-9 {
			short = append(short, fmt.Sprintf("%g of %g cpus free", math.Max(0, roundCPUs(cpuFree)), roundCPUs(cpuCap)))
		}
		if float64(need.MemoryBytes) > memFree {
			short = append(short, fmt.Sprintf("%s of %s memory free", formatBytes(int64(math.Max(0, memFree))), formatBytes(int64(memCap))))
		}
		if diskNeed > float64(n.PoolFreeBytes) {
			short = append(short, fmt.Sprintf("%s pool free, %s needed", formatBytes(n.PoolFreeBytes), formatBytes(int64(diskNeed))))
		}
		hasTmpl := need.TemplateDataset == "" || slices.Contains(n.Templates, need.TemplateDataset)
		if !hasTmpl && !p.TemplatePreferred {
			if len(short) == 0 {
				noTemplate = true
			}
			short = append(short, "template "+need.Template+" is not in its pool")
		}
		if len(short) > 0 {
			reasons = append(reasons, n.Name+": "+strings.Join(short, ", "))
			continue
		}
		c := cand{n: n, share: math.Max(share(l.CPUs+need.CPUs, cpuCap), share(float64(l.MemoryBytes+need.MemoryBytes), memCap)), count: l.Sandboxes, tmpl: hasTmpl}
		if best == nil || (c.tmpl && !best.tmpl) || (c.tmpl == best.tmpl && less(c.share, c.count, c.n, best.share, best.count, best.n)) {
			best = &c
		}
	}
	if best == nil {
		return store.Node{}, &NoRoomError{Need: need, Reasons: reasons, NoTemplate: noTemplate}
	}
	return best.n, nil
}

// share is used of capacity (0 when there is no capacity and nothing is
// used of it).
func share(used, capacity float64) float64 {
	if capacity <= 0 {
		if used <= 0 {
			return 0
		}
		return math.Inf(1)
	}
	return used / capacity
}

// less orders candidates: lower share, then fewer sandboxes, then more
// pool free, then name.
func less(sa float64, ca int, a store.Node, sb float64, cb int, b store.Node) bool {
	const eps = 1e-9
	switch {
	case sa < sb-eps:
		return true
	case sa > sb+eps:
		return false
	case ca != cb:
		return ca < cb
	case a.PoolFreeBytes != b.PoolFreeBytes:
		return a.PoolFreeBytes > b.PoolFreeBytes
	}
	return a.Name < b.Name
}

// roundCPUs rounds a cpu count for a message.
func roundCPUs(c float64) float64 { return math.Round(c*100) / 100 }

// formatBytes reads "1.5 GiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// InstanceTypeNeed is what a sandbox of the named instance type takes
// ("" is defaultType), with its disk quota replaced by diskBytes when that
// is set (as a create's disk_bytes does). An unknown name is
// errs.ErrInvalid.
func InstanceTypeNeed(types []client.InstanceType, defaultType, name string, diskBytes int64) (Need, error) {
	if name == "" {
		name = defaultType
	}
	for _, it := range types {
		if it.Name == name {
			n := Need{CPUs: it.Limits.CPUs, MemoryBytes: it.Limits.MemoryBytes, DiskBytes: it.Limits.DiskBytes}
			if diskBytes > 0 {
				n.DiskBytes = diskBytes
			}
			return n, nil
		}
	}
	return Need{}, fmt.Errorf("instance type %q is not known: %w", name, errs.ErrInvalid)
}

// sandboxSpec is the part of a sandbox record's spec (owned by the sandbox
// service) that placement reads: its limits.
type sandboxSpec struct {
	Limits client.Limits `json:"limits"`
}

// SandboxNeed is what the sandbox sb takes, by the limits in its record's
// spec (what the failover coordinator places again).
func SandboxNeed(sb store.Sandbox) (Need, error) {
	var sp sandboxSpec
	if err := json.Unmarshal(sb.Spec, &sp); err != nil {
		return Need{}, fmt.Errorf("read the limits of sandbox %s: %w", sb.ID, err)
	}
	return Need{CPUs: sp.Limits.CPUs, MemoryBytes: sp.Limits.MemoryBytes, DiskBytes: sp.Limits.DiskBytes}, nil
}

// runsOnNode reports whether a sandbox in state st takes cpus and memory
// on its node (a stopped, archived, errored or deleted one takes none).
func runsOnNode(st store.SandboxState) bool {
	return st == store.StateRunning || st == store.StatePaused || st == store.StateCreating
}

// Loads sums what each node's sandboxes take: every lease's sandbox counts
// on the lease's node (lapsed leases too: a node that is still alive keeps
// the data of a sandbox whose lease it released), the running ones with
// their limits. Leases of sandboxes without a record are left out.
func Loads(owners []store.Ownership, sandboxes []store.Sandbox) map[string]Load {
	byID := make(map[string]store.Sandbox, len(sandboxes))
	for _, sb := range sandboxes {
		byID[sb.ID] = sb
	}
	out := map[string]Load{}
	for _, o := range owners {
		sb, ok := byID[o.SandboxID]
		if !ok || sb.State == store.StateDeleted {
			continue
		}
		l := out[o.Node]
		l.Sandboxes++
		if runsOnNode(sb.State) {
			if n, err := SandboxNeed(sb); err == nil {
				l.CPUs += n.CPUs
				l.MemoryBytes += n.MemoryBytes
			}
		}
		out[o.Node] = l
	}
	return out
}

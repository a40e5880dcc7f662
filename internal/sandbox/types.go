package sandbox

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/names"
)

// InstanceTypes are the named limit sets, smallest first. Disk quotas are
// what E2B gives (10 GiB for its default sandbox, 20 GiB on larger plans)
// and double each step; every one is a promise out of the storage pool
// (see capacity.go), so a pool made with the defaults (half the free
// space of its file system) holds several of each.
var instanceTypes = []client.InstanceType{
	{Name: "micro", Limits: client.Limits{CPUs: 0.5, MemoryBytes: 512 << 20, Pids: 256, DiskBytes: 5 << 30}},
	{Name: "small", Limits: client.Limits{CPUs: 1, MemoryBytes: 2 << 30, Pids: 1024, DiskBytes: 10 << 30}},
	{Name: "medium", Limits: client.Limits{CPUs: 2, MemoryBytes: 4 << 30, Pids: 2048, DiskBytes: 20 << 30}},
	{Name: "large", Limits: client.Limits{CPUs: 4, MemoryBytes: 8 << 30, Pids: 4096, DiskBytes: 40 << 30}},
}

// Bounds of limits given by hand (resize, a create's disk_bytes).
const (
	minMemoryBytes = 32 << 20
	minDiskBytes   = 64 << 20
	minCPUs        = 0.01
	// maxCPUs is far above any host; a cpu quota past it overflows the
	// kernel's cfs limits.
	maxCPUs = 1024
	// maxPids is the kernel's PID_MAX_LIMIT: pids.max refuses more.
	maxPids = 4 << 20
	// maxID is the largest uid or gid an exec may ask for: a sandbox's
	// user namespace maps 65536 ids (0-65535), and setuid to an unmapped
	// id fails.
	maxID = 65535
)

// checkLimits refuses limits given by hand that the kernel would refuse
// at the next start (a sandbox that can never start again) or that make
// no sense: CPUs from 0.01 to 1024, memory from 32 MiB, pids
// up to PID_MAX_LIMIT, disk from 64 MiB (the pool bounds it above). A
// zero field means "unchanged".
func checkLimits(l client.Limits) error {
	switch {
	case l.CPUs < 0 || l.MemoryBytes < 0 || l.Pids < 0 || l.DiskBytes < 0:
		return fmt.Errorf("limits must not be negative: %w", errs.ErrInvalid)
	case l.CPUs != 0 && (l.CPUs < minCPUs || l.CPUs > maxCPUs):
		return fmt.Errorf("cpus %g: want 0.01 to %d: %w", l.CPUs, maxCPUs, errs.ErrInvalid)
	case l.MemoryBytes != 0 && l.MemoryBytes < minMemoryBytes:
		return fmt.Errorf("memory %d bytes is below the 32 MiB minimum: %w", l.MemoryBytes, errs.ErrInvalid)
	case l.Pids > maxPids:
		return fmt.Errorf("pids %d: at most %d (the kernel's limit): %w", l.Pids, maxPids, errs.ErrInvalid)
	case l.DiskBytes != 0 && l.DiskBytes < minDiskBytes:
		return fmt.Errorf("disk %d bytes is below the 64 MiB minimum: %w", l.DiskBytes, errs.ErrInvalid)
	}
	return nil
}

// checkName refuses a name given to a sandbox or a volume: it must be a
// valid hostname label (validName) and must not have the form of an id.
func checkName(kind, name string) error {
	if !validName(name) {
		return fmt.Errorf("%s name %q: use 1 to 63 letters, digits and inner dashes: %w", kind, name, errs.ErrInvalid)
	}
	if names.LooksLikeID(name) {
		return fmt.Errorf("%s name %q has the form of an id (%s...): choose another: %w", kind, name, strings.Join(names.IDPrefixes, "..., "), errs.ErrInvalid)
	}
	return nil
}

// checkStrings refuses a NUL byte in strings handed to the kernel (exec
// arguments, a working directory): execve and chdir cannot carry one.
func checkStrings(what string, ss ...string) error {
	for i, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			if len(ss) > 1 {
				return fmt.Errorf("%s %d contains a NUL byte: %w", what, i, errs.ErrInvalid)
			}
			return fmt.Errorf("%s contains a NUL byte: %w", what, errs.ErrInvalid)
		}
	}
	return nil
}

// DefaultInstanceType is used when a create request names none.
const DefaultInstanceType = "small"

// InstanceTypes returns the instance types.
func InstanceTypes() []client.InstanceType {
	return append([]client.InstanceType(nil), instanceTypes...)
}

func lookupInstanceType(name string) (client.InstanceType, error) {
	if name == "" {
		name = DefaultInstanceType
	}
	for _, it := range instanceTypes {
		if it.Name == name {
			return it, nil
		}
	}
	return client.InstanceType{}, fmt.Errorf("instance type %q (want micro, small, medium or large): %w", name, errs.ErrInvalid)
}

// spec is the JSON stored in store.Sandbox.Spec. internal/tenancy reads
// two of its fields from the store by their JSON names, "limits" (the
// quotas' usage) and "secret_refs" (which sandboxes use a secret): keep
// those names.
type spec struct {
	// Origin is the snapshot the sandbox was last forked or rolled back
	// from; snapshots taken of it record it as their parent.
	Origin       string            `json:"origin,omitempty"`
	InstanceType string            `json:"instance_type"`
	Limits       client.Limits     `json:"limits"`
	Env          map[string]string `json:"env,omitempty"`
	Service      *client.Service   `json:"service,omitempty"`
	// Secrets holds the values of Env and Service.Env sealed for the
	// sandbox (secrets.go); the maps then keep the names only.
	Secrets string `json:"secrets,omitempty"`
	// SecretRefs reference the tenant's secrets (internal/tenancy): names
	// only, the values are opened at start and at each exec.
	SecretRefs []client.SecretRef `json:"secret_refs,omitempty"`
	// Volumes are the volume mounts, with volume ids.
	Volumes     []client.VolumeMount `json:"volumes,omitempty"`
	IdleTimeout time.Duration        `json:"idle_timeout"`
	OnIdle      string               `json:"on_idle"`
	MaxRuntime  time.Duration        `json:"max_runtime,omitempty"`
	// Network is the egress policy (nil: policy.Default, the internet on).
	Network *client.NetworkPolicy `json:"network,omitempty"`
	// AutoResume lets a request to an exposed port start or resume it.
	AutoResume bool `json:"auto_resume,omitempty"`
	// Ports are the exposed ports; a fork or a restore starts with none.
	Ports []portSpec `json:"ports,omitempty"`
	// Labels are given at create and kept by forks and restores.
	Labels map[string]string `json:"labels,omitempty"`
	// Warm is set on a sandbox taken from the warm pool (warm.go): it
	// booted without Env, so every exec is given Env until its next start.
	Warm bool `json:"warm,omitempty"`
	// Spare is the spare clone (spares.go) the root was renamed from, set
	// in the record before the rename: Reconcile redoes a rename that a
	// crash of the machine undid. "" when the root was made otherwise.
	Spare string `json:"spare,omitempty"`
	// Failover is the failover policy (client.FailoverRestore or
	// client.FailoverNone; "" reads as restore). internal/cluster reads
	// this key (cluster.FailoverPolicyOf).
	Failover string `json:"failover,omitempty"`
}

// parseDuration parses an optional Go duration; "" gives def.
func parseDuration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q is not a duration like 90s or 15m: %w", field, s, errs.ErrInvalid)
	}
	return d, nil
}

// user resolves an exec user to uid and gid: "" and "agent" are 1000,
// "root" is 0, and numeric "uid" or "uid:gid" are taken as given.
func user(u string) (int, int, error) {
	switch u {
	case "", "agent":
		return 1000, 1000, nil
	case "root":
		return 0, 0, nil
	}
	a, b, hasGID := strings.Cut(u, ":")
	uid, err := strconv.Atoi(a)
	if err != nil || uid < 0 || uid > maxID {
		return 0, 0, fmt.Errorf("user %q (want agent, root, UID or UID:GID, ids 0 to %d): %w", u, maxID, errs.ErrInvalid)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.Atoi(b); err != nil || gid < 0 || gid > maxID {
			return 0, 0, fmt.Errorf("user %q (ids 0 to %d): %w", u, maxID, errs.ErrInvalid)
		}
	}
	return uid, gid, nil
}

// envList turns an env map into a sorted KEY=VALUE list, rejecting bad keys.
func envList(m map[string]string) ([]string, error) {
	out := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, fmt.Errorf("environment variable %q: a name is not empty and has no '=' or NUL byte, a value has no NUL byte: %w", k, errs.ErrInvalid)
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

var signals = map[string]int{"SIGTERM": 15, "SIGINT": 2, "SIGHUP": 1, "SIGQUIT": 3, "SIGUSR1": 10, "SIGUSR2": 12, "SIGKILL": 9}

func signalNumber(s string) (int, error) {
	if s == "" {
		return 15, nil
	}
	n, ok := signals[strings.ToUpper(s)]
	if !ok {
		n, ok = signals["SIG"+strings.ToUpper(s)]
	}
	if !ok {
		return 0, fmt.Errorf("stop signal %q (want SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2): %w", s, errs.ErrInvalid)
	}
	return n, nil
}

// validName reports whether a sandbox name is acceptable (it doubles as
// the hostname).
func validName(n string) bool {
	if n == "" || len(n) > 63 {
		return false
	}
	for i, c := range n {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || (c >= 'A' && c <= 'Z')
		if !ok || (c == '-' && (i == 0 || i == len(n)-1)) {
			return false
		}
	}
	return true
}

// Package sandbox is the sandbox service: the lifecycle state machine
// (creating → running ⇄ paused → stopped → deleted), instance types,
// templates, exec, files, the auto-stop policy and start-up reconciliation.
// It implements api.Backend on top of a store.Store, a pool.Pool and a
// runtime.Runtime.
//
// Crash ordering: a lifecycle change is written to the store only after the
// runtime and pool have done it (a sandbox is "running" in the store only
// once its init answers; "stopped" only once its processes are gone). After
// a kill -9 of the daemon, Reconcile makes the store agree with the runtime:
// running sandboxes are re-adopted, vanished ones are marked stopped, and
// half-created ones are removed.
package sandbox

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// InstanceTypes are the named limit sets, smallest first.
var instanceTypes = []client.InstanceType{
	{Name: "micro", Limits: client.Limits{CPUs: 0.5, MemoryBytes: 512 << 20, Pids: 256, DiskBytes: 5 << 30}},
	{Name: "small", Limits: client.Limits{CPUs: 1, MemoryBytes: 2 << 30, Pids: 1024, DiskBytes: 30 << 30}},
	{Name: "medium", Limits: client.Limits{CPUs: 2, MemoryBytes: 4 << 30, Pids: 2048, DiskBytes: 60 << 30}},
	{Name: "large", Limits: client.Limits{CPUs: 4, MemoryBytes: 8 << 30, Pids: 4096, DiskBytes: 120 << 30}},
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

// spec is the JSON stored in store.Sandbox.Spec.
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
	// Volumes are the volume mounts, with volume ids.
	Volumes     []client.VolumeMount `json:"volumes,omitempty"`
	IdleTimeout time.Duration        `json:"idle_timeout"`
	OnIdle      string               `json:"on_idle"`
	MaxRuntime  time.Duration        `json:"max_runtime,omitempty"`
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
	if err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("user %q (want agent, root, UID or UID:GID): %w", u, errs.ErrInvalid)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.Atoi(b); err != nil || gid < 0 {
			return 0, 0, fmt.Errorf("user %q: %w", u, errs.ErrInvalid)
		}
	}
	return uid, gid, nil
}

// envList turns an env map into a sorted KEY=VALUE list, rejecting bad keys.
func envList(m map[string]string) ([]string, error) {
	out := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, fmt.Errorf("environment variable %q: %w", k, errs.ErrInvalid)
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

// Package runtime defines how stead runs sandboxes: the Runtime interface
// and the specification of one sandbox. The Linux implementation
// (runtime/linux) sets a sandbox up itself, with stead's own init as PID 1
// making its mounts (see package guest), and keeps runc's libcontainer for
// the lifecycle after the start.
package runtime

import (
	"context"
	"io"
	"time"

	"github.com/stead-dev/stead/internal/guest"
)

// Limits are the resources a sandbox may use.
type Limits struct {
	CPUs        float64 // cores; 0 = unlimited
	MemoryBytes int64   // 0 = unlimited
	Pids        int64   // 0 = unlimited
}

// Mount is an extra bind mount into the sandbox.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
}

// Spec describes one sandbox to start.
type Spec struct {
	ID       string
	Hostname string
	// Rootfs is the host directory of the sandbox's root (a pool dataset).
	Rootfs string
	Limits Limits
	Mounts []Mount
	// Env is the base environment of every process in the sandbox.
	Env []string
	// TmpBytes caps the /tmp tmpfs (it counts against the memory limit).
	TmpBytes int64
	Service  *guest.ServiceSpec
	// Network, when set, is called once the sandbox's namespaces exist and
	// before its init runs anything: pid is the init's host pid, so its
	// network namespace is /proc/<pid>/ns/net (package network links it
	// to the host). An error fails the start. The namespace is the
	// sandbox's own, owned by its user namespace; the sandbox's root holds
	// no CAP_NET_ADMIN, so it cannot reconfigure it.
	Network func(ctx context.Context, pid int) error
}

// Status is what the runtime knows of a sandbox.
type Status string

// Statuses.
const (
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped" // the container exists but its init is gone
	StatusAbsent  Status = "absent"
)

// Stats are a sandbox's resource counters.
type Stats struct {
	CPUUsage    time.Duration // cumulative
	MemoryBytes int64
	// MemoryWorkingSetBytes is MemoryBytes less the inactive page cache
	// (what the kernel cannot simply drop), as kubelet counts it: what
	// nears the limit before the OOM killer acts.
	MemoryWorkingSetBytes int64
	Pids                  int64
}

// Runtime runs sandboxes.
//
// Contract:
//   - Start returns once the sandbox's init accepts requests; on error nothing
//     is left behind (no cgroup, no state).
//   - Stop runs the service's stop hook, waits up to grace, kills what is
//     left and removes the sandbox's runtime state; stopping an absent
//     sandbox is not an error (idempotent).
//   - Status of an unknown id is StatusAbsent, not an error.
//   - Sandboxes keep running when the daemon process exits; a new Runtime
//     on the same state directory adopts them (List, Status, Exec work).
type Runtime interface {
	Start(ctx context.Context, spec Spec) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Kill destroys a sandbox at once (no stop hook).
	Kill(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (Status, error)
	Stats(ctx context.Context, id string) (Stats, error)
	// Update changes the limits of a running sandbox.
	Update(ctx context.Context, id string, l Limits) error
	// List returns the ids of every sandbox the runtime holds state for.
	List(ctx context.Context) ([]string, error)
	// Sweep removes what a crash can leave behind for sandboxes the runtime
	// holds no state for (cgroups, run directories); it returns the ids it
	// cleaned.
	Sweep(ctx context.Context) ([]string, error)
	// Exec runs a process; see guest.Client.Exec.
	Exec(ctx context.Context, id string, spec guest.ExecSpec) (guest.ExecResult, error)
	// ServiceInput writes data to the supervised service's stdin.
	ServiceInput(ctx context.Context, id string, data []byte) error
	// OpenPTY starts a process on a terminal.
	OpenPTY(ctx context.Context, id string, spec guest.ExecSpec, rows, cols uint16) (PTY, error)
}

// A Reserver is a runtime that can begin a sandbox's start ahead of its
// Start: Reserve readies what the start will use (for the native runtime,
// a shell, with the sandbox's network attach begun in it through network,
// which is what Spec.Network will be) while the caller still makes the
// sandbox's record and root. The Start of id uses it; cancel gives it up
// when no Start is to come. Reserve may do nothing (the Start then goes
// as without it).
type Reserver interface {
	Reserve(ctx context.Context, id string, network func(ctx context.Context, pid int) error) (cancel func())
}

// PTY is an interactive terminal session.
type PTY interface {
	io.ReadWriteCloser
	Resize(rows, cols uint16) error
	Wait() (int, error)
}

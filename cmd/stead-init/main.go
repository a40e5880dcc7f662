// Init starts in the host's cgroups and sets its sandbox up before it
// joins the sandbox's: the Go runtime must not open the host's cgroup
// files to size GOMAXPROCS (Go 1.25's container-aware GOMAXPROCS keeps
// them open, and the sandbox's root could read them through /proc/1/fd).
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

// Command stead-init is the init that runs as PID 1 inside every stead
// sandbox (package guest): the exec server, the reaper and the agent
// supervisor. It is the same code the stead binary runs as
// "stead sandbox-init", built as a separate small static binary because
// every process start on a VM pays for each page it touches: stead-init
// starts in a third of the time of the full stead binary and keeps about a
// quarter of its resident memory in every running sandbox.
package main

import "github.com/stead-dev/stead/internal/guest"

func main() { guest.Main() }

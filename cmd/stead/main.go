// Init starts in the host's cgroups and sets its sandbox up before it
// joins the sandbox's: the Go runtime must not open the host's cgroup
// files to size GOMAXPROCS (Go 1.25's container-aware GOMAXPROCS keeps
// them open, and the sandbox's root could read them through /proc/1/fd).
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

// Command stead is the stead daemon, its CLI and the init process that runs
// as PID 1 inside every sandbox.
package main

import (
	"os"

	"github.com/stead-dev/stead/internal/runtime/linux"
)

func main() {
	// libcontainer's container setup, PID 1 inside a sandbox, or the
	// runtime shim when stead-shim is missing.
	if linux.RunRole() {
		return
	}
	os.Exit(run(os.Args[1:]))
}

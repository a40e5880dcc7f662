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

// Command stead is the stead daemon, its CLI and the init process that runs
// as PID 1 inside every sandbox.
package main

import (
	"os"

	"github.com/stead-dev/stead/internal/guest"
	"github.com/stead-dev/stead/internal/runtime/linux"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case linux.InitArg: // libcontainer's container setup
			linux.InitHook()
			return
		case linux.SandboxInitArg: // PID 1 inside a sandbox
			guest.Main()
			return
		case linux.ShimArg: // when stead-shim is missing
			linux.ShimMain()
			return
		}
	}
	os.Exit(run(os.Args[1:]))
}

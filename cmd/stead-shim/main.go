// Command stead-shim is the small process the stead daemon forks its
// sandboxes from (see runtime/linux's shim): libcontainer re-executes it as
// each sandbox's setup init, and a small static binary starts there in a
// third of the time of the full stead binary. The daemon looks for it
// beside its own binary and plays the shim itself when it is missing.
package main

import (
	"os"

	"github.com/stead-dev/stead/internal/runtime/linux"
)

func main() {
	if linux.RunRole() { // the shim, or libcontainer's container setup
		return
	}
	os.Stderr.WriteString("stead-shim is started by the stead daemon, not by hand\n")
	os.Exit(2)
}

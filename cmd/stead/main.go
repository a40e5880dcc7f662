// Command stead is the stead daemon, its CLI and the init process that runs
// as PID 1 inside every sandbox.
package main

import (
	"os"
)

func main() {
	if len(os.Args) > 1 {
		if hook, ok := reexecHooks[os.Args[1]]; ok {
			hook()
			return
		}
	}
	os.Exit(run(os.Args[1:]))
}

// reexecHooks are the entry points of stead re-executing itself: the
// container runtime's init and stead's own sandbox init. They are filled in
// by files of this package (runtime.go) so main stays free of them.
var reexecHooks = map[string]func(){}

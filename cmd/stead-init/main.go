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

package client

// LogConfig is the rotation of the agent service's log
// (/var/log/agent.log in the sandbox): it is rotated at a line boundary
// when it would pass MaxSize, and Keep rotated files are kept, compressed,
// in the sandbox root (so they persist and are pushed like every file).
type LogConfig struct {
	MaxSize string `json:"max_size,omitempty" doc:"Rotate when the log would pass this size: 1MiB to 64GiB, e.g. 64MiB (default), 16M, 1048576"`
	Keep    *int   `json:"keep,omitempty" minimum:"0" maximum:"100" doc:"Rotated files kept, gzip-compressed (default 4; 0 keeps none)"`
}

// LogOptions select what Client.ReadLogs returns.
type LogOptions struct {
	// Follow keeps the response open and streams new output, across
	// rotations, until the context ends.
	Follow bool
	// Since skips output written before it (to about a second): a Go
	// duration back from now ("10m") or an RFC 3339 time.
	Since string
}

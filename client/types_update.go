package client

// UpdateSandboxRequest changes settings of an existing sandbox in any
// state but deleted (PATCH /v1/sandboxes/{id}). An absent field keeps its
// value.
type UpdateSandboxRequest struct {
	// IdleTimeout is a Go duration; "0" disables the idle policy.
	IdleTimeout *string `json:"idle_timeout,omitempty" doc:"Go duration; 0 disables auto-stop"`
	// OnIdle is what the idle policy does: stop or pause.
	OnIdle *string `json:"on_idle,omitempty" enum:"stop,pause" doc:"OnIdle is what the idle policy does: stop or pause."`
}

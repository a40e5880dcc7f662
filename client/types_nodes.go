package client

import "time"

// Node states (Node.State).
const (
	// NodeActive nodes take new sandboxes.
	NodeActive = "active"
	// NodeCordoned nodes take no new sandboxes; the ones they run stay.
	NodeCordoned = "cordoned"
	// NodeDraining nodes take no new sandboxes and are to be emptied.
	NodeDraining = "draining"
)

// Node is one stead daemon of a cluster as it last reported itself.
type Node struct {
	Name          string    `json:"name" doc:"Node name (unique in the cluster)"`
	Address       string    `json:"address" doc:"Where other nodes reach the node's internal API (host:port)"`
	CPUs          float64   `json:"cpus" doc:"The node's cpus"`
	MemoryBytes   int64     `json:"memory_bytes" doc:"The node's memory"`
	PoolFreeBytes int64     `json:"pool_free_bytes" doc:"Free space of the node's storage pool"`
	Version       string    `json:"version" doc:"stead version the node runs"`
	State         string    `json:"state" enum:"active,cordoned,draining" doc:"active takes new sandboxes; cordoned and draining take none (draining is to be emptied)"`
	StartedAt     time.Time `json:"started_at" doc:"When the node's daemon started"`
	HeartbeatAt   time.Time `json:"heartbeat_at" doc:"The node's last heartbeat"`
	CreatedAt     time.Time `json:"created_at" doc:"When the node first registered"`
	// Alive is whether the last heartbeat is within the grace period.
	Alive bool `json:"alive" doc:"Whether the last heartbeat is within the grace period"`
	// Templates are the dataset ids of the templates in the node's pool
	// (a template of the default tenant by its id; another tenant's as
	// t<16 hex digits>-<id>).
	Templates []string `json:"templates,omitempty" doc:"Dataset ids of the templates in the node's pool, as of its last heartbeat"`
	// Self marks the node that answered the request.
	Self bool `json:"self,omitempty" doc:"The node that answered"`
}

// EvacuateRequest moves every sandbox off a node.
type EvacuateRequest struct {
	Wait bool `json:"wait,omitempty" doc:"Answer when the evacuation is done instead of at once"`
}

// EvacuateResult is the result of an evacuate operation.
type EvacuateResult struct {
	Node string `json:"node" doc:"The evacuated node (left draining)"`
	// Moved are the sandboxes now on another node.
	Moved []EvacuatedSandbox `json:"moved" doc:"Sandboxes moved to another node"`
	// Failed are the sandboxes left where they were, with the reason.
	Failed []EvacuatedSandbox `json:"failed" doc:"Sandboxes that stayed on the node (a failure before the hand-over leaves a sandbox where it was)"`
}

// EvacuatedSandbox is one sandbox of an evacuation.
type EvacuatedSandbox struct {
	Sandbox string `json:"sandbox" doc:"Sandbox id"`
	Target  string `json:"target,omitempty" doc:"Node it moved to (or was to move to)"`
	Push    string `json:"push,omitempty" doc:"Id of the push it was restored from"`
	// PauseSeconds is how long the sandbox was frozen: from the pause
	// before its last delta push until it ran on the target.
	PauseSeconds float64 `json:"pause_seconds,omitempty" doc:"Seconds the sandbox was paused: its last delta push plus the restore on the target"`
	Error        string  `json:"error,omitempty" doc:"Why it did not move"`
}

// LostCopy is the kept root of a sandbox a node ran and then lost the
// lease of (another node owns the sandbox now): what the agent wrote there
// after the sandbox's last push, kept until an operator recovers it into
// a new sandbox or discards it.
type LostCopy struct {
	// Node is the node whose pool holds the copy.
	Node string `json:"node" doc:"Node whose pool holds the copy"`
	// Copy names the copy on its node: lost-<epoch>-<sandbox id>.
	Copy string `json:"copy" doc:"Name of the copy on its node (lost-<epoch>-<sandbox id>)"`
	// Sandbox is the id of the sandbox it is a copy of.
	Sandbox string `json:"sandbox" doc:"Id of the sandbox it is a copy of"`
	// SandboxName and Tenant are that sandbox's, from its record ("" when
	// the record is gone).
	SandboxName string `json:"sandbox_name,omitempty" doc:"Name of that sandbox (empty when its record is gone)"`
	Tenant      string `json:"tenant,omitempty" doc:"Tenant of that sandbox (empty when its record is gone)"`
	// Epoch is the lease epoch the node knew when it kept the copy.
	Epoch int64 `json:"epoch" doc:"Lease epoch the node knew when it kept the copy"`
	// KeptAt is when the copy was kept (its root was renamed).
	KeptAt time.Time `json:"kept_at" doc:"When the node kept the copy"`
	// SizeBytes is what the copy takes in the node's pool (-1: unknown).
	SizeBytes int64 `json:"size_bytes" doc:"What the copy takes in the node's pool (-1 when it cannot be read)"`
}

// RecoverLostCopyRequest makes a new sandbox from a kept copy.
type RecoverLostCopyRequest struct {
	Name string `json:"name,omitempty" doc:"Name of the new sandbox (default: its id)"`
}

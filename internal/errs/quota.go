package errs

import (
	"errors"
	"fmt"
	"strconv"
)

// Tenant quota names (QuotaError.Quota), as the API and the CLI spell them.
const (
	QuotaRunningSandboxes = "running_sandboxes"
	QuotaCPUs             = "cpus"
	QuotaMemoryBytes      = "memory_bytes"
	QuotaDiskBytes        = "disk_bytes"
	QuotaVolumes          = "volumes"
	QuotaRepositoryBytes  = "repository_bytes"
	QuotaSnapshots        = "snapshots"
	QuotaStateBytes       = "state_bytes"
)

// QuotaError refuses an operation that would take a tenant past one of
// its quotas (HTTP 429, with the fields below as extension members of the
// problem document). It is not ErrQuota: that one means the machine (its
// storage pool) is full, whoever asks; this one is the tenant's own limit,
// set by an admin.
type QuotaError struct {
	// Quota is one of the Quota* names.
	Quota string
	// Limit is the tenant's limit, Usage what it holds now (pending
	// operations included) and Requested what the refused operation would
	// have added (0 for a push: the repository quota refuses any push once
	// the usage has reached the limit).
	Limit, Usage, Requested float64
	// Op says what was refused ("start sandbox web"), for logs and
	// events; the message leaves it to the callers' wrapping.
	Op string
}

// Error says which quota, its limit, the usage and what was asked:
// "quota running_sandboxes: limit 2, in use 2, requested 1; ...", sizes
// in bytes with their binary-unit reading.
func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota %s: limit %s, in use %s, requested %s; %s, or ask an admin to raise the quota (stead tenant quota)",
		e.Quota, e.format(e.Limit), e.format(e.Usage), e.format(e.Requested), e.remedy())
}

// remedy says how a tenant makes room under the quota itself.
func (e *QuotaError) remedy() string {
	switch e.Quota {
	case QuotaRunningSandboxes, QuotaCPUs, QuotaMemoryBytes:
		return "stop a running or paused sandbox first (a paused one counts)"
	case QuotaDiskBytes:
		return "delete and purge sandboxes or volumes, or resize them smaller, first"
	case QuotaVolumes:
		return "delete and purge a volume first"
	case QuotaSnapshots:
		return "delete snapshots first"
	case QuotaRepositoryBytes:
		return "forget old pushes first (stead repo prune)"
	case QuotaStateBytes:
		return "keep fewer checkpoint versions, prune session threads, or delete tasks, observations and keys first"
	}
	return "free some first"
}

// IsBytes reports whether the quota counts bytes.
func (e *QuotaError) IsBytes() bool {
	switch e.Quota {
	case QuotaMemoryBytes, QuotaDiskBytes, QuotaRepositoryBytes, QuotaStateBytes:
		return true
	}
	return false
}

// format writes v as the quota counts it.
func (e *QuotaError) format(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !e.IsBytes() || v < 1024 {
		return s
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	u, f := -1, v
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%s (%.4g %s)", s, f, units[u])
}

// AsQuota returns the QuotaError in err's chain, if there is one.
func AsQuota(err error) (*QuotaError, bool) {
	var qe *QuotaError
	if errors.As(err, &qe) {
		return qe, true
	}
	return nil, false
}

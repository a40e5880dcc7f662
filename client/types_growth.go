package client

import "time"

// DiskUsage is where the space under one path of a sandbox or a volume
// went (GET /v1/sandboxes/{id}/du, GET /v1/volumes/{id}/du).
type DiskUsage struct {
	// Path is the path walked (in the sandbox, or in the volume).
	Path string `json:"path" doc:"Path is the path walked (in the sandbox, or in the volume)."`
	// Bytes is the space allocated under Path (a file with several hard
	// links counted once); ApparentBytes the file sizes added up.
	Bytes         int64 `json:"bytes" doc:"Space allocated under the path (hard links counted once)"`
	ApparentBytes int64 `json:"apparent_bytes" doc:"File sizes added up"`
	Files         int64 `json:"files" doc:"Files, symlinks and special files under the path"`
	Dirs          int64 `json:"dirs" doc:"Directories under the path, itself included"`
	// Children are the path's own entries, largest first.
	Children []DiskUsageEntry `json:"children" doc:"The path's own entries, largest first"`
	// LargestFiles are the largest files anywhere under the path.
	LargestFiles []DiskUsageEntry `json:"largest_files" doc:"The largest files anywhere under the path"`
	// LargestDirs are the directories whose own files take the most
	// space (not counting their sub-directories): where the space went.
	LargestDirs []DiskUsageEntry `json:"largest_dirs" doc:"Directories whose own files (not sub-directories) take the most space"`
	// Skipped counts entries that vanished or could not be read while
	// the walk ran, and mount points of other file systems.
	Skipped int64 `json:"skipped" doc:"Entries that vanished or were unreadable during the walk"`
	// QuotaBytes and UsedBytes are the sandbox's disk quota and what its
	// root uses of it (or the volume's size and use): the walk is of one
	// path, these of the whole.
	QuotaBytes int64 `json:"quota_bytes,omitempty" doc:"The sandbox's disk quota (the volume's size)"`
	UsedBytes  int64 `json:"used_bytes,omitempty" doc:"What the sandbox's root (the volume) uses of it"`
	// Elapsed is how long the walk took.
	ElapsedMS int64 `json:"elapsed_ms" doc:"How long the walk took, in milliseconds"`
}

// DiskUsageEntry is one file or directory of a DiskUsage.
type DiskUsageEntry struct {
	Path  string `json:"path" doc:"Absolute path inside the sandbox"`
	Type  string `json:"type" enum:"file,dir,symlink,other" doc:"Kind of entry"`
	Bytes int64  `json:"bytes" doc:"Size in bytes"`
	Files int64  `json:"files" doc:"Files the bytes are made of"`
}

// Resources a LimitWarning is about.
const (
	LimitDisk   = "disk"
	LimitMemory = "memory"
	LimitVolume = "volume"
	LimitPool   = "pool"
)

// LimitWarning says a sandbox (or a volume, or the pool) is close to a
// limit: use crossed a warning level (80% and 95% by default).
type LimitWarning struct {
	// Resource is disk (the sandbox's root against its quota), memory
	// (its working set against its limit), volume (a volume against its
	// size) or pool (the daemon's storage pool).
	Resource string `json:"resource" enum:"disk,memory,volume,pool" doc:"Resource is disk (the sandbox's root against its quota), memory (its working set against its limit), volume (a volume against its size) or pool (the daemon's storage pool)."`
	// Subject is the sandbox or volume id ("" for the pool).
	Subject string `json:"subject,omitempty" doc:"Subject is the sandbox or volume id (\"\" for the pool)."`
	// Path is where the resource shows in the sandbox (the volume's mount
	// path; "/" for the root).
	Path       string    `json:"path,omitempty" doc:"Path is where the resource shows in the sandbox (the volume's mount path; \"/\" for the root)."`
	UsedBytes  int64     `json:"used_bytes" doc:"Bytes in use"`
	LimitBytes int64     `json:"limit_bytes" doc:"Limit in bytes (0: no limit)"`
	Percent    float64   `json:"percent" doc:"Use as a percentage of the limit"`
	Level      float64   `json:"level" doc:"The warning level crossed, as a percentage (80, 95)"`
	Since      time.Time `json:"since" doc:"When the level was crossed"`
	// Message says it in a sentence.
	Message string `json:"message" doc:"Message says it in a sentence."`
}

// LargeFile is a file in a state directory larger than the daemon's
// hint size: history worth off-loading.
type LargeFile struct {
	Path  string `json:"path" doc:"Absolute path inside the sandbox"`
	Bytes int64  `json:"bytes" doc:"Size in bytes"`
}

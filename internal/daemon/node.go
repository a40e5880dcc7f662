package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/pool"
	"github.com/stead-dev/stead/internal/store"
)

// newNodeRegistry makes this daemon's entry in the node registry: its name
// (cfg.NodeName, else the host name), its internal address (cfg.NodeAddress,
// else the API's TCP address, else its socket) and a capacity measured at
// each heartbeat.
func newNodeRegistry(cfg Config, st store.NodeStore, log *slog.Logger) (*cluster.Registry, error) {
	name := cfg.NodeName
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node name: host name: %w", err)
		}
		name = h
	}
	addr := cfg.NodeAddress
	switch {
	case addr != "":
	case cfg.Listen != "":
		addr = cfg.Listen
	default:
		addr = "unix:" + cfg.Socket
	}
	poolDir := filepath.Join(cfg.DataDir, "pool")
	return cluster.New(cluster.Options{Store: st, Name: name, Address: addr, Version: cfg.Version,
		Interval: cfg.NodeHeartbeat, Grace: cfg.NodeGrace, Logger: log,
		Capacity: func(context.Context) (cluster.Capacity, error) {
			c := cluster.Capacity{CPUs: float64(runtime.NumCPU())}
			var si unix.Sysinfo_t
			if err := unix.Sysinfo(&si); err != nil {
				return c, fmt.Errorf("sysinfo: %w", err)
			}
			c.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
			var fs unix.Statfs_t
			if err := unix.Statfs(poolDir, &fs); err != nil {
				return c, fmt.Errorf("statfs %s: %w", poolDir, err)
			}
			c.PoolFreeBytes = int64(fs.Bavail) * fs.Bsize
			// Both pool implementations keep a dataset at <pool>/<kind>/<id>;
			// a template being built is under a hidden name, not a valid id.
			ents, err := os.ReadDir(filepath.Join(poolDir, pool.KindTemplate))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return c, fmt.Errorf("list the pool's templates: %w", err)
			}
			for _, e := range ents {
				if e.IsDir() && pool.ValidID(e.Name()) {
					c.Templates = append(c.Templates, e.Name())
				}
			}
			return c, nil
		}})
}

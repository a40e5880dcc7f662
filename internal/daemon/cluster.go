package daemon

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/stead-dev/stead/internal/cluster"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/sandbox"
	"github.com/stead-dev/stead/internal/store"
)

// minClusterSecret is the shortest cluster secret accepted, in bytes.
const minClusterSecret = 32

// clusterNode is what a daemon in cluster mode (Config.ClusterSecretFile)
// has besides a single-node daemon: the cluster secret every node shares
// and this node's sandbox owner leases.
type clusterNode struct {
	secret []byte
	leases *cluster.Leases
	// svc is the sandbox service, once made: the leases' OnLost reaches it.
	svc atomic.Pointer[sandbox.Service]
}

// loadClusterSecret reads the cluster secret file: at least 32 bytes
// (surrounding white space trimmed), readable by its owner only.
func loadClusterSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster secret file %s is readable by others (mode %o): chmod 600 it: %w", path, fi.Mode().Perm(), errs.ErrInvalid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < minClusterSecret {
		return nil, fmt.Errorf("cluster secret file %s holds %d bytes; at least %d are needed (e.g. head -c 32 /dev/urandom | base64 > %s): %w", path, len(b), minClusterSecret, path, errs.ErrInvalid)
	}
	return b, nil
}

// deriveKey derives a 32-byte key for purpose from the cluster secret, so
// the keys every node must share (sandbox tokens, sealed environments,
// webhook signatures) need no file copied between nodes.
func deriveKey(secret []byte, purpose string) ([]byte, error) {
	k, err := hkdf.Key(sha256.New, secret, nil, "stead cluster: "+purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the %s key: %w", purpose, err)
	}
	return k, nil
}

// newClusterNode checks that cfg can run as a cluster node and makes its
// lease set; nil when cfg is a single-node daemon.
func newClusterNode(cfg Config, st store.Store, node string, log *slog.Logger) (*clusterNode, error) {
	if cfg.ClusterSecretFile == "" {
		return nil, nil
	}
	if !strings.HasPrefix(cfg.Store, "postgres://") && !strings.HasPrefix(cfg.Store, "postgresql://") {
		return nil, fmt.Errorf("a cluster needs the nodes' shared PostgreSQL store (--store postgres://...), not %q: %w", redactStore(cfg.Store), errs.ErrInvalid)
	}
	secret, err := loadClusterSecret(cfg.ClusterSecretFile)
	if err != nil {
		return nil, err
	}
	c := &clusterNode{secret: secret}
	c.leases, err = cluster.NewLeases(cluster.LeaseOptions{Store: st, Node: node, TTL: cfg.LeaseTTL, Logger: log,
		OnLost: func(id string, err error) {
			if svc := c.svc.Load(); svc != nil {
				go svc.LeaseLost(context.Background(), id, err)
			}
		}})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// owner is the sandbox service's Owner: the leases in a cluster, nil (the
// sole owner) on a single node.
func (c *clusterNode) owner() sandbox.Owner {
	if c == nil {
		return nil
	}
	return c.leases
}

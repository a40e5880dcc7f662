package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const nodeCols = "name, address, cpus, memory_bytes, pool_free_bytes, version, state, started_at, heartbeat_at, created_at, templates"

// HeartbeatNode registers or refreshes the node n.Name; see store.NodeStore.
func (s *Store) HeartbeatNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == "" || n.Address == "" {
		return store.Node{}, fmt.Errorf("heartbeat node %q: empty name or address: %w", n.Name, errs.ErrInvalid)
	}
	if n.CPUs < 0 || n.MemoryBytes < 0 || n.PoolFreeBytes < 0 {
		return store.Node{}, fmt.Errorf("heartbeat node %s: negative capacity: %w", n.Name, errs.ErrInvalid)
	}
	if n.HeartbeatAt.IsZero() {
		n.HeartbeatAt = now()
	}
	if n.StartedAt.IsZero() {
		n.StartedAt = n.HeartbeatAt
	}
	beat, err := FormatTime(n.HeartbeatAt)
	if err != nil {
		return store.Node{}, fmt.Errorf("heartbeat node %s: heartbeat_at: %w", n.Name, err)
	}
	started, err := FormatTime(n.StartedAt)
	if err != nil {
		return store.Node{}, fmt.Errorf("heartbeat node %s: started_at: %w", n.Name, err)
	}
	tmpls := slices.Clone(n.Templates)
	slices.Sort(tmpls)
	tmpls = slices.Compact(tmpls)
	if tmpls == nil {
		tmpls = []string{}
	}
	tj, err := json.Marshal(tmpls)
	if err != nil {
		return store.Node{}, fmt.Errorf("heartbeat node %s: templates: %w", n.Name, err)
	}
	var out store.Node
	err = s.writeTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO nodes ("+nodeCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"+
			" ON CONFLICT (name) DO UPDATE SET address = excluded.address, cpus = excluded.cpus, memory_bytes = excluded.memory_bytes,"+
			" pool_free_bytes = excluded.pool_free_bytes, version = excluded.version, started_at = excluded.started_at,"+
			" heartbeat_at = excluded.heartbeat_at, templates = excluded.templates",
			n.Name, n.Address, n.CPUs, n.MemoryBytes, n.PoolFreeBytes, n.Version, store.NodeActive, started, beat, beat, string(tj)); err != nil {
			return err
		}
		var err error
		out, err = scanNode(tx.QueryRowContext(ctx, "SELECT "+nodeCols+" FROM nodes WHERE name = ?", n.Name))
		return err
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("heartbeat node %s: %w", n.Name, err)
	}
	return out, nil
}

// GetNode returns the node name.
func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	n, err := scanNode(s.r.QueryRowContext(ctx, "SELECT "+nodeCols+" FROM nodes WHERE name = ?", name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Node{}, fmt.Errorf("get node %s: %w", name, errs.ErrNotFound)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %s: %w", name, err)
	}
	return n, nil
}

// ListNodes returns every node, by name.
func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	return queryAll(ctx, s.r, "list nodes", scanNode, "SELECT "+nodeCols+" FROM nodes ORDER BY name")
}

// SetNodeState sets the node's state; see store.NodeStore.
func (s *Store) SetNodeState(ctx context.Context, name, state string) (store.Node, error) {
	if !store.ValidNodeState(state) {
		return store.Node{}, fmt.Errorf("set node %s state %q: want active, cordoned or draining: %w", name, state, errs.ErrInvalid)
	}
	out, err := updateOne(ctx, s, scanNode, "UPDATE nodes SET state = ? WHERE name = ?", []any{state, name},
		"SELECT "+nodeCols+" FROM nodes WHERE name = ?", name)
	if err != nil {
		return store.Node{}, fmt.Errorf("set node %s state: %w", name, err)
	}
	return out, nil
}

func scanNode(sc scanner) (store.Node, error) {
	var n store.Node
	var started, beat, created, tmpls string
	if err := sc.Scan(&n.Name, &n.Address, &n.CPUs, &n.MemoryBytes, &n.PoolFreeBytes, &n.Version, &n.State,
		&started, &beat, &created, &tmpls); err != nil {
		return store.Node{}, err
	}
	if err := json.Unmarshal([]byte(tmpls), &n.Templates); err != nil {
		return store.Node{}, fmt.Errorf("node %s: templates: %w", n.Name, err)
	}
	if n.Templates == nil {
		n.Templates = []string{}
	}
	var err error
	if n.StartedAt, err = parseTime(started); err != nil {
		return store.Node{}, err
	}
	if n.HeartbeatAt, err = parseTime(beat); err != nil {
		return store.Node{}, err
	}
	if n.CreatedAt, err = parseTime(created); err != nil {
		return store.Node{}, err
	}
	return n, nil
}

package rig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Overlap is a moment two nodes ran one sandbox at the same time.
type Overlap struct {
	ID    string
	Nodes []string
	At    time.Time
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s ran on %s at once (%s)", o.ID, strings.Join(o.Nodes, " and "), o.At.Format("15:04:05.000"))
}

// Checker samples, at a fixed interval, which node runs which sandbox,
// from the host's cgroups alone (the daemons are not asked), and records
// every moment two nodes ran the same one. A sandbox runs on a node when
// its cgroup below the node's parent has processes and is not frozen (a
// paused copy executes nothing).
type Checker struct {
	c        *Cluster
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	samples  int
	where    map[string][]string // latest sample: sandbox → nodes running it
	seen     map[string][]string // every node a sandbox ever ran on, in order
	overlaps []Overlap
}

// StartChecker starts sampling every interval (100 ms when 0) until Stop.
func (c *Cluster) StartChecker(interval time.Duration) *Checker {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Checker{c: c, interval: interval, cancel: cancel, done: make(chan struct{}), where: map[string][]string{}, seen: map[string][]string{}}
	k.sample()
	go k.run(ctx)
	return k
}

func (k *Checker) run(ctx context.Context) {
	defer close(k.done)
	t := time.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.sample()
		}
	}
}

// Stop ends the sampling (after one last sample).
func (k *Checker) Stop() {
	k.cancel()
	<-k.done
	k.sample()
}

// running reads one node's running sandboxes: id → pids. A sandbox runs
// when its cgroup is not frozen and holds a process that is not dying (a
// process being killed out of a frozen cgroup is thawed with its SIGKILL
// pending and never returns to user space).
func running(n *Node) map[string][]int {
	out := map[string][]int{}
	for _, sp := range n.Sandboxes() {
		if sp.Frozen {
			continue
		}
		live := slices.DeleteFunc(slices.Clone(sp.Pids), dying)
		if len(live) > 0 {
			out[sp.ID] = live
		}
	}
	return out
}

// dying reports whether process pid runs no more code of its own: it is
// gone, or every one of its threads is exiting, a zombie, or has SIGKILL
// pending. (/proc/<pid>/stat describes the leader only, which may have
// exited while other threads run on.)
func dying(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return true
	}
	for _, t := range tasks {
		if !threadDying(fmt.Sprintf("/proc/%d/task/%s", pid, t.Name())) {
			return false
		}
	}
	return true
}

// threadDying reports whether the thread at dir (/proc/<pid>/task/<tid>)
// is gone, exiting, a zombie, or has SIGKILL pending.
func threadDying(dir string) bool {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid flags ...; comm may
	// hold spaces and parentheses, so fields count from its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	if f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return true
	}
	const pfExiting = 0x4
	if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfExiting != 0 {
		return true
	}
	st, err := os.ReadFile(dir + "/status")
	if err != nil {
		return true
	}
	const sigkill = 1 << (9 - 1)
	for _, l := range strings.Split(string(st), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && m&sigkill != 0 {
			return true
		}
	}
	return false
}

// sample reads every node once. The nodes are read one after another, so a
// sandbox that moved between two reads could look doubled: an apparent
// overlap is confirmed by reading the nodes again, and counts only if every
// node but the last one read still runs a process it ran at the first read
// (so it ran throughout, including when the last one was seen running it).
func (k *Checker) sample() {
	now := time.Now()
	first := make([]map[string][]int, len(k.c.Nodes))
	for i, n := range k.c.Nodes {
		first[i] = running(n)
	}
	where := map[string][]string{}
	for i, n := range k.c.Nodes {
		for id := range first[i] {
			where[id] = append(where[id], n.Name)
		}
	}
	var found []Overlap
	for id, nodes := range where {
		if len(nodes) < 2 {
			continue
		}
		last := ""
		for i := len(k.c.Nodes) - 1; i >= 0; i-- {
			if _, ok := first[i][id]; ok {
				last = k.c.Nodes[i].Name
				break
			}
		}
		confirmed := true
		for i, n := range k.c.Nodes {
			pids, ok := first[i][id]
			if !ok || n.Name == last {
				continue
			}
			again := running(n)[id]
			if !slices.ContainsFunc(pids, func(p int) bool { return slices.Contains(again, p) }) {
				confirmed = false
			}
		}
		if confirmed {
			found = append(found, Overlap{ID: id, Nodes: nodes, At: now})
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.samples++
	k.where = where
	for id, nodes := range where {
		for _, n := range nodes {
			if s := k.seen[id]; len(s) == 0 || s[len(s)-1] != n {
				k.seen[id] = append(s, n)
			}
		}
	}
	k.overlaps = append(k.overlaps, found...)
}

// Samples is the number of samples taken.
func (k *Checker) Samples() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.samples
}

// Overlaps returns every confirmed overlap so far.
func (k *Checker) Overlaps() []Overlap {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.overlaps)
}

// Where returns the nodes that ran id at the latest sample.
func (k *Checker) Where(id string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.where[id])
}

// Seen returns the nodes id ran on so far, in the order it moved.
func (k *Checker) Seen(id string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.seen[id])
}

// Placement returns, at the latest sample, the running sandboxes of each
// node (node name → sorted ids).
func (k *Checker) Placement() map[string][]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string][]string{}
	for id, nodes := range k.where {
		for _, n := range nodes {
			out[n] = append(out[n], id)
		}
	}
	for _, ids := range out {
		sort.Strings(ids)
	}
	return out
}

// WaitStopped waits until a sample shows id running nowhere, and returns
// the nodes the latest sample shows it on (none: it stopped) when the
// timeout passed. A sample taken before a stop still shows it running, so
// a caller that has just stopped id waits here instead of reading Where.
func (k *Checker) WaitStopped(ctx context.Context, id string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		w := k.Where(id)
		if len(w) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return w
		}
		time.Sleep(k.interval)
	}
}

// WaitRunning waits until id runs on exactly one node other than those in
// not, and returns that node (or "" when the timeout passed).
func (k *Checker) WaitRunning(ctx context.Context, id string, timeout time.Duration, not ...string) string {
	deadline := time.Now().Add(timeout)
	for {
		if w := k.Where(id); len(w) == 1 && !slices.Contains(not, w[0]) {
			return w[0]
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return ""
		}
		time.Sleep(k.interval)
	}
}

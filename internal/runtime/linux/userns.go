package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// User namespaces. Every sandbox runs in its own user namespace that maps
// its ids 0..IDRangeSize-1 to a range of unprivileged host ids of its own
// (a "slot"): root inside is host uid IDBase+slot*IDRangeSize, which owns
// nothing on the host. Files keep the ids the sandbox sees on disk: the
// root filesystem and every bind mount are idmapped mounts (MOUNT_ATTR_IDMAP)
// through a user namespace with the same mapping, so a snapshot, a push
// and a restore see exactly the ids the agent made, and a tree is the same
// whichever slot the sandbox runs in next time.
//
// Slots are chosen at start (the lowest free one), so two running
// sandboxes never share host ids; a new Runtime reads the slots of running
// sandboxes back from libcontainer's state.

const (
	// IDRangeSize is the number of ids mapped into every sandbox (0..65535).
	IDRangeSize = 65536
	// DefaultIDBase is the first host id of the first slot: far above any
	// host user and below 2^31.
	DefaultIDBase = 1 << 30
	// DefaultIDSlots bounds the number of concurrently running sandboxes
	// with distinct host ranges (IDBase + IDSlots*IDRangeSize < 2^31).
	DefaultIDSlots = 8192
)

// idMap is the mapping of one slot.
func (r *Runtime) idMap(slot int) []configs.IDMap {
	return []configs.IDMap{{ContainerID: 0, HostID: r.hostID(slot), Size: IDRangeSize}}
}

// hostID is the host id that id 0 of slot maps to.
func (r *Runtime) hostID(slot int) int64 {
	return int64(r.opts.IDBase) + int64(slot)*IDRangeSize
}

// allocSlot picks the slot of a sandbox about to start: the lowest one no
// other sandbox of this runtime holds, so that slots (and the user
// namespaces cached for their idmapped mounts) are reused as sandboxes
// stop and start. The caller holds no lock.
func (r *Runtime) allocSlot(id string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.lowestFreeSlot(id)
	if s < 0 {
		return 0, fmt.Errorf("start sandbox %s: all %d user-namespace id ranges are in use", id, r.opts.IDSlots)
	}
	r.slots.set(id, s)
	return s, nil
}

// lowestFreeSlot is the lowest slot no sandbox but except holds (-1 when
// every one is taken). The caller holds r.mu.
func (r *Runtime) lowestFreeSlot(except string) int {
	return r.slots.lowestFree(except, r.opts.IDSlots)
}

// moveSlot gives the slot from holds (a shell's) to id and returns it.
func (r *Runtime) moveSlot(from, id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slots.of[from]
	r.slots.drop(from)
	r.slots.set(id, s)
	return s
}

func (r *Runtime) freeSlot(id string) {
	r.mu.Lock()
	r.slots.drop(id)
	r.mu.Unlock()
}

// slotTable is which sandbox (or shell) holds which user-namespace slot,
// with a count of holders per slot and a bit per slot that has one: the
// lowest free slot is found by a look at one word per 64 slots, not by
// going over every running sandbox, on each start.
type slotTable struct {
	of   map[string]int // holder → slot
	held map[int]int    // slot → how many hold it
	bits []uint64       // bit s%64 of word s/64: slot s has a holder
}

func newSlotTable() *slotTable {
	return &slotTable{of: map[string]int{}, held: map[int]int{}}
}

// set makes id the holder of slot s (in place of the slot it held).
func (t *slotTable) set(id string, s int) {
	t.drop(id)
	t.of[id] = s
	t.held[s]++
	for len(t.bits) <= s/64 {
		t.bits = append(t.bits, 0)
	}
	t.bits[s/64] |= 1 << (s % 64)
}

// drop forgets id's slot.
func (t *slotTable) drop(id string) {
	s, ok := t.of[id]
	if !ok {
		return
	}
	delete(t.of, id)
	if t.held[s]--; t.held[s] <= 0 {
		delete(t.held, s)
		t.bits[s/64] &^= 1 << (s % 64)
	}
}

// lowestFree is the lowest of slots 0..n-1 that no holder but except
// holds, or -1.
func (t *slotTable) lowestFree(except string, n int) int {
	ex, hasEx := t.of[except]
	for s := 0; s < n; s++ {
		if w := s / 64; s%64 == 0 && w < len(t.bits) && t.bits[w] == ^uint64(0) && !(hasEx && ex/64 == w) {
			s += 63 // a full word: none free in it
			continue
		}
		if h := t.held[s]; h == 0 || (hasEx && s == ex && h == 1) {
			return s
		}
	}
	return -1
}

// loadSlots reads the slots of the sandboxes running under StateDir (their
// libcontainer state holds the uid mapping).
func (r *Runtime) loadSlots() {
	ents, _ := os.ReadDir(r.opts.StateDir)
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.opts.StateDir, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var st struct {
			Config struct {
				UIDMappings []configs.IDMap `json:"uid_mappings"`
			} `json:"config"`
		}
		if json.Unmarshal(b, &st) != nil || len(st.Config.UIDMappings) == 0 {
			continue
		}
		off := st.Config.UIDMappings[0].HostID - int64(r.opts.IDBase)
		if off >= 0 && off%IDRangeSize == 0 && off/IDRangeSize < int64(r.opts.IDSlots) {
			r.slots.set(e.Name(), int(off/IDRangeSize))
		}
	}
}

// usernsFile returns a user namespace with slot's mapping, for idmapped
// mounts. It is made once per slot (newUserNS), kept open and reused.
func (r *Runtime) usernsFile(slot int) (*os.File, error) {
	r.mu.Lock()
	f, ok := r.userns[slot]
	r.mu.Unlock()
	if ok {
		return f, nil
	}
	var err error
	if r.shim != nil {
		f, err = r.shim.userns(r.hostID(slot))
	} else {
		f, err = newUserNS(r.hostID(slot))
	}
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.userns[slot]; ok { // made meanwhile by prewarm
		f.Close()
		return old, nil
	}
	r.userns[slot] = f
	return f, nil
}

// prewarm makes, off any start's path, the user namespace of the slot the
// next start will take, so that a start of one more sandbox does not wait
// for it (a few milliseconds: a process is made and stopped).
func (r *Runtime) prewarm() {
	r.mu.Lock()
	next := r.lowestFreeSlot("")
	_, have := r.userns[next]
	r.mu.Unlock()
	if next >= 0 && !have {
		go r.usernsFile(next)
	}
}

// newUserNS makes a user namespace mapping 0..IDRangeSize-1 to host ids
// from host: a child is cloned into it and stopped by ptrace at its exec,
// before it runs any code; the namespace is opened and the child killed.
func newUserNS(host int64) (*os.File, error) {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(host), Size: IDRangeSize}}
	p, err := os.StartProcess("/proc/self/exe", []string{"stead-userns"}, &os.ProcAttr{
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: m,
			GidMappings: m,
			Ptrace:      true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("make user namespace for ids %d..%d: %w", host, host+IDRangeSize-1, err)
	}
	defer func() {
		p.Kill()
		p.Wait()
	}()
	f, err := os.Open("/proc/" + strconv.Itoa(p.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("open user namespace: %w", err)
	}
	return f, nil
}

// idmapMountFlags are set on the sandbox root's idmapped mount: device
// nodes and setuid bits on disk mean nothing inside (no_new_privs already
// stops setuid gains; nodev keeps a restored device node unusable).
const idmapMountFlags = unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID

// mountRootfs makes the idmapped mount of src for sandbox id in slot at
// <RootfsDir>/<id>/<nonce> and returns that path (one mount point per start,
// so the release of one start never meets the next). <id> is mode 0700 and
// owned by the sandbox's root, so its setup (which resolves the path as
// that unprivileged host id) can reach it and no other host user can.
func (r *Runtime) mountRootfs(id, src string, slot int) (string, error) {
	ns, err := r.usernsFile(slot)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(r.opts.RootfsDir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("rootfs mount point: %w", err)
	}
	host := int(r.hostID(slot))
	if err := os.Chown(dir, host, host); err != nil {
		return "", fmt.Errorf("rootfs mount point: %w", err)
	}
	target, err := os.MkdirTemp(dir, "root-")
	if err != nil {
		return "", fmt.Errorf("rootfs mount point: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		os.Remove(target)
		return "", fmt.Errorf("clone rootfs mount %s: %w", src, err)
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{
		Attr_set: idmapMountFlags, Userns_fd: uint64(ns.Fd())}); err != nil {
		os.Remove(target)
		if errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w (the file system of %s does not support idmapped mounts on this kernel)", err, src)
		}
		return "", fmt.Errorf("idmap rootfs %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(target)
		return "", fmt.Errorf("attach rootfs mount %s: %w", target, err)
	}
	return target, nil
}

// releaseRootfs removes one start's host-side rootfs mount (the sandbox
// keeps its own copy of the mount) and its mount point, and <id> when it
// is empty.
func releaseRootfs(target string) {
	unix.Unmount(target, unix.MNT_DETACH)
	os.Remove(target)
	os.Remove(filepath.Dir(target)) // fails while another start's is there
}

// unmountRootfs removes every host-side rootfs mount of id. Idempotent.
func (r *Runtime) unmountRootfs(id string) {
	dir := filepath.Join(r.opts.RootfsDir, id)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		releaseRootfs(filepath.Join(dir, e.Name()))
	}
	os.Remove(dir)
}

// makeRootfsDir creates RootfsDir, searchable by the sandboxes' roots.
// Mounts made and released below it never reach a sandbox: each sandbox's
// mounts are private (Config.RootPropagation), not slaves of the host's.
func makeRootfsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create rootfs dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("rootfs dir: %w", err)
	}
	return nil
}

// searchable reports whether every ancestor of dir lets other users pass
// (o+x), as the sandbox's unprivileged root must to reach its rootfs.
func searchable(dir string) bool {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) != nil || st.Mode&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

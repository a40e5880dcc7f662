package btrfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// loopMajor is the block major of loop devices.
const loopMajor = 7

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	mountpoint string
	fstype     string
	source     string
}

// unescapeMount undoes the octal escaping of mountinfo (\040 for space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readMounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 2 {
			continue
		}
		out = append(out, mountEntry{
			mountpoint: unescapeMount(a[4]),
			fstype:     b[0],
			source:     unescapeMount(b[1]),
		})
	}
	return out, sc.Err()
}

// mountAt returns the topmost mount whose mountpoint is dir, or nil.
func mountAt(dir string) (*mountEntry, error) {
	ms, err := readMounts()
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var found *mountEntry
	for i := range ms {
		if ms[i].mountpoint == dir {
			found = &ms[i]
		}
	}
	return found, nil
}

// isDevice reports whether the mount's source is block device
// major:minor. It looks at the source path, not at the mount's own
// major:minor, which btrfs sets to an anonymous device.
func (m mountEntry) isDevice(major, minor uint32) bool {
	if !strings.HasPrefix(m.source, "/dev/") {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat(m.source, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false
	}
	return unix.Major(st.Rdev) == major && unix.Minor(st.Rdev) == minor
}

// mountsOfDevice returns the mountpoints of block device major:minor.
func mountsOfDevice(major, minor uint32) ([]string, error) {
	ms, err := readMounts()
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []string
	for _, m := range ms {
		if m.isDevice(major, minor) {
			out = append(out, m.mountpoint)
		}
	}
	return out, nil
}

// loopDev is an attached loop device.
type loopDev struct {
	path  string
	minor uint32
}

// loopsBackedBy lists the loop devices whose backing file is the inode of
// image (compared by device and inode number, so a renamed or re-opened path
// still matches).
func loopsBackedBy(image string) ([]loopDev, error) {
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return nil, fmt.Errorf("stat image %s: %w", image, err)
	}
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	var out []loopDev
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "loop")
		if !ok {
			continue
		}
		minor, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			continue
		}
		// Cheap filter first: only attached devices have loop/backing_file.
		if _, err := os.Stat(filepath.Join("/sys/block", e.Name(), "loop", "backing_file")); err != nil {
			continue
		}
		path := "/dev/" + e.Name()
		info, err := loopStatus(path)
		if err != nil {
			continue // detached meanwhile, or no node
		}
		if info.Device == st.Dev && info.Inode == st.Ino {
			out = append(out, loopDev{path: path, minor: uint32(minor)})
		}
	}
	return out, nil
}

func loopStatus(path string) (*unix.LoopInfo64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return unix.IoctlLoopGetStatus64(fd)
}

// attachLoop binds a free loop device to the open image imgFD with
// LO_FLAGS_AUTOCLEAR, so that unmounting the file system frees the device.
// It uses LOOP_CTL_GET_FREE + LOOP_CONFIGURE and falls back to losetup when
// the kernel lacks LOOP_CONFIGURE.
//
// It returns an open descriptor of the device, which the caller must keep
// until the device is mounted: autoclear frees the device at its last
// close, mounted or not.
func attachLoop(ctx context.Context, image string, imgFD int) (loopDev, int, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return attachLoopCLIHeld(ctx, image)
	}
	defer unix.Close(ctl)
	for attempt := 0; attempt < 16; attempt++ {
		if err := ctx.Err(); err != nil {
			return loopDev{}, -1, err
		}
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return loopDev{}, -1, fmt.Errorf("get free loop device: %w", err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		fd, err := openLoopNode(path)
		if err != nil {
			return loopDev{}, -1, fmt.Errorf("open %s: %w", path, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(imgFD)}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image)
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if errors.Is(err, unix.EINVAL) {
			// Some backing file systems refuse direct I/O.
			cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
			err = unix.IoctlLoopConfigure(fd, &cfg)
		}
		if err == nil {
			return loopDev{path: path, minor: uint32(n)}, fd, nil
		}
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.EBUSY):
			continue // another process took it between GET_FREE and CONFIGURE
		case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL):
			return attachLoopCLIHeld(ctx, image)
		default:
			return loopDev{}, -1, fmt.Errorf("configure %s: %w", path, err)
		}
	}
	return loopDev{}, -1, fmt.Errorf("attach loop device: %w", unix.EBUSY)
}

// openLoopNode opens a loop device node, waiting briefly for devtmpfs or
// udev to create it.
func openLoopNode(path string) (int, error) {
	var err error
	for i := 0; i < 50; i++ {
		var fd int
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return -1, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1, err
}

// attachLoopCLIHeld attaches with losetup (no autoclear) and opens the
// device like attachLoop does.
func attachLoopCLIHeld(ctx context.Context, image string) (loopDev, int, error) {
	dev, err := attachLoopCLI(ctx, image)
	if err != nil {
		return dev, -1, err
	}
	fd, err := unix.Open(dev.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = detachLoop(dev)
		return loopDev{}, -1, fmt.Errorf("open %s: %w", dev.path, err)
	}
	return dev, fd, nil
}

func attachLoopCLI(ctx context.Context, image string) (loopDev, error) {
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", image).CombinedOutput()
	if err != nil {
		return loopDev{}, fmt.Errorf("losetup %s: %w: %s", image, err, strings.TrimSpace(string(out)))
	}
	path := strings.TrimSpace(string(out))
	n, err := strconv.ParseUint(strings.TrimPrefix(path, "/dev/loop"), 10, 32)
	if err != nil {
		return loopDev{}, fmt.Errorf("losetup %s: unexpected device %q", image, path)
	}
	return loopDev{path: path, minor: uint32(n)}, nil
}

// detachLoop frees a loop device; a device already detached is not an error.
func detachLoop(dev loopDev) error {
	var err error
	for i := 0; i < 100; i++ {
		var fd int
		fd, err = unix.Open(dev.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
			return nil
		}
		if err != nil {
			return err
		}
		err = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		unix.Close(fd)
		if err == nil || errors.Is(err, unix.ENXIO) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		// EBUSY: autoclear is running down the device; wait and re-check.
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

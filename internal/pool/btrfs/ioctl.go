package btrfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The btrfs ioctl ABI (include/uapi/linux/btrfs.h, btrfs_tree.h). The
// request numbers are computed from the struct sizes below so that a wrong
// layout shows up as a wrong size in TestIoctlABISizes, not as EINVAL.

const btrfsIoctlMagic = 0x94

const (
	iocWrite = 1
	iocRead  = 2
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | btrfsIoctlMagic<<8 | nr
}

// btrfs_ioctl_vol_args.
type volArgs struct {
	fd   int64
	name [4088]byte
}

// btrfs_ioctl_vol_args_v2. The union { struct { size; qgroup_inherit };
// unused[4] } is spelled out: size, then the user pointer to a
// btrfs_qgroup_inherit.
type volArgsV2 struct {
	fd          int64
	transid     uint64
	flags       uint64
	inheritSize uint64
	inherit     unsafe.Pointer // *qgroupInherit
	unused      [2]uint64
	name        [4040]byte
}

// btrfs_qgroup_inherit with room for one qgroup id (qgroups[] is a
// flexible array; the kernel reads 8 * num_qgroups bytes of it).
type qgroupInherit struct {
	flags         uint64
	numQgroups    uint64
	numRefCopies  uint64
	numExclCopies uint64
	lim           qgroupLimit
	qgroups       [1]uint64
}

// btrfs_qgroup_limit.
type qgroupLimit struct {
	flags   uint64
	maxRfer uint64
	maxExcl uint64
	rsvRfer uint64
	rsvExcl uint64
}

// btrfs_ioctl_qgroup_assign_args.
type qgroupAssignArgs struct {
	assign uint64
	src    uint64
	dst    uint64
}

// btrfs_ioctl_qgroup_create_args.
type qgroupCreateArgs struct {
	create   uint64
	qgroupid uint64
}

// btrfs_ioctl_quota_rescan_args.
type quotaRescanArgs struct {
	flags    uint64
	progress uint64
	reserved [6]uint64
}

// btrfs_ioctl_quota_ctl_args.
type quotaCtlArgs struct {
	cmd    uint64
	status uint64
}

// btrfs_ioctl_qgroup_limit_args.
type qgroupLimitArgs struct {
	qgroupid uint64
	flags    uint64
	maxRfer  uint64
	maxExcl  uint64
	rsvRfer  uint64
	rsvExcl  uint64
}

// btrfs_ioctl_ino_lookup_args.
type inoLookupArgs struct {
	treeid   uint64
	objectid uint64
	name     [4080]byte
}

// btrfs_ioctl_search_key.
type searchKey struct {
	treeID      uint64
	minObjectID uint64
	maxObjectID uint64
	minOffset   uint64
	maxOffset   uint64
	minTransid  uint64
	maxTransid  uint64
	minType     uint32
	maxType     uint32
	nrItems     uint32
	unused      uint32
	unused1     [4]uint64
}

// btrfs_ioctl_search_args.
type searchArgs struct {
	key searchKey
	buf [4096 - unsafe.Sizeof(searchKey{})]byte
}

var (
	ioctlSubvolCreate    = ioc(iocWrite, 14, unsafe.Sizeof(volArgs{}))
	ioctlSnapDestroy     = ioc(iocWrite, 15, unsafe.Sizeof(volArgs{}))
	ioctlTreeSearch      = ioc(iocWrite|iocRead, 17, unsafe.Sizeof(searchArgs{}))
	ioctlInoLookup       = ioc(iocWrite|iocRead, 18, unsafe.Sizeof(inoLookupArgs{}))
	ioctlSnapCreateV2    = ioc(iocWrite, 23, unsafe.Sizeof(volArgsV2{}))
	ioctlSubvolCreateV2  = ioc(iocWrite, 24, unsafe.Sizeof(volArgsV2{}))
	ioctlQgroupAssign    = ioc(iocWrite, 41, unsafe.Sizeof(qgroupAssignArgs{}))
	ioctlQgroupCreate    = ioc(iocWrite, 42, unsafe.Sizeof(qgroupCreateArgs{}))
	ioctlQuotaRescan     = ioc(iocWrite, 44, unsafe.Sizeof(quotaRescanArgs{}))
	ioctlSpaceInfo       = ioc(iocWrite|iocRead, 20, 16) // sizeof(btrfs_ioctl_space_args) without spaces[]
	ioctlFSInfo          = ioc(iocRead, 31, 1024)        // sizeof(btrfs_ioctl_fs_info_args)
	ioctlSubvolGetFlags  = ioc(iocRead, 25, 8)
	ioctlSubvolSetFlags  = ioc(iocWrite, 26, 8)
	ioctlQuotaCtl        = ioc(iocWrite|iocRead, 40, unsafe.Sizeof(quotaCtlArgs{}))
	ioctlQgroupLimit     = ioc(iocRead, 43, unsafe.Sizeof(qgroupLimitArgs{}))
	ioctlQuotaRescanWait = ioc(0, 46, 0)
)

const (
	subvolRdonly        = 1 << 1 // BTRFS_SUBVOL_RDONLY
	subvolQgroupInherit = 1 << 2 // BTRFS_SUBVOL_QGROUP_INHERIT

	blockGroupMetadata = 1 << 2 // BTRFS_BLOCK_GROUP_METADATA
	blockGroupDup      = 1 << 5 // BTRFS_BLOCK_GROUP_DUP

	quotaCtlEnable       = 1 // BTRFS_QUOTA_CTL_ENABLE
	quotaCtlEnableSimple = 4 // BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA (kernel >= 6.7)

	qgroupStatusKey        = 240    // BTRFS_QGROUP_STATUS_KEY
	qgroupStatusFlagsOffst = 16     // offsetof(btrfs_qgroup_status_item, flags)
	qgroupStatusFlagSimple = 1 << 3 // BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE

	qgroupLimitMaxExcl = 1 << 1     // BTRFS_QGROUP_LIMIT_MAX_EXCL
	qgroupLimitClear   = ^uint64(0) // CLEAR_VALUE in fs/btrfs/qgroup.c

	firstFreeObjectID   = 256 // BTRFS_FIRST_FREE_OBJECTID: a subvolume's root inode
	quotaTreeObjectID   = 8   // BTRFS_QUOTA_TREE_OBJECTID
	qgroupInfoKey       = 242 // BTRFS_QGROUP_INFO_KEY
	searchHeaderSize    = 32  // btrfs_ioctl_search_header
	qgroupInfoExclOffst = 24  // offsetof(btrfs_qgroup_info_item, excl)
	qgroupLevelShift    = 48  // BTRFS_QGROUP_LEVEL_SHIFT: qgroupid = level<<48 | id
)

// qgroupInheritSize is sizeof(struct btrfs_qgroup_inherit) + 8 * 1: the
// header and one qgroup id.
const qgroupInheritSize = unsafe.Sizeof(qgroupInherit{})

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return e
		}
	}
}

func setName(dst []byte, name string) error {
	if len(name) >= len(dst) || name == "" {
		return fmt.Errorf("subvolume name %q: %w", name, unix.ENAMETOOLONG)
	}
	copy(dst, name)
	return nil
}

// subvolCreate creates subvolume name in the directory parentFD.
func subvolCreate(parentFD int, name string) error {
	var a volArgs
	if err := setName(a.name[:], name); err != nil {
		return err
	}
	return ioctl(parentFD, ioctlSubvolCreate, unsafe.Pointer(&a))
}

// setInherit makes the subvolume that a's ioctl creates a member of
// qgroup group (0: of none) from its first transaction, so no rescan is
// needed.
func setInherit(a *volArgsV2, inh *qgroupInherit, group uint64) {
	if group == 0 {
		return
	}
	*inh = qgroupInherit{numQgroups: 1, qgroups: [1]uint64{group}}
	a.flags |= subvolQgroupInherit
	a.inheritSize = uint64(qgroupInheritSize)
	a.inherit = unsafe.Pointer(inh)
}

// subvolCreateIn creates subvolume name in the directory parentFD as a
// member of qgroup group (0: of none).
func subvolCreateIn(parentFD int, name string, group uint64) error {
	if group == 0 {
		return subvolCreate(parentFD, name)
	}
	var a volArgsV2
	var inh qgroupInherit
	if err := setName(a.name[:], name); err != nil {
		return err
	}
	setInherit(&a, &inh, group)
	err := ioctl(parentFD, ioctlSubvolCreateV2, unsafe.Pointer(&a))
	runtime.KeepAlive(&inh)
	return err
}

// snapCreate snapshots the subvolume srcFD as name in the directory
// parentFD, as a member of qgroup group (0: of none).
func snapCreate(parentFD, srcFD int, name string, readOnly bool, group uint64) error {
	var a volArgsV2
	var inh qgroupInherit
	a.fd = int64(srcFD)
	if readOnly {
		a.flags = subvolRdonly
	}
	if err := setName(a.name[:], name); err != nil {
		return err
	}
	setInherit(&a, &inh, group)
	err := ioctl(parentFD, ioctlSnapCreateV2, unsafe.Pointer(&a))
	runtime.KeepAlive(&inh)
	return err
}

// snapDestroy deletes the subvolume name in the directory parentFD, with
// everything in it. It fails with ENOTEMPTY if nested subvolumes remain.
func snapDestroy(parentFD int, name string) error {
	var a volArgs
	if err := setName(a.name[:], name); err != nil {
		return err
	}
	return ioctl(parentFD, ioctlSnapDestroy, unsafe.Pointer(&a))
}

func subvolGetFlags(fd int) (uint64, error) {
	var f uint64
	err := ioctl(fd, ioctlSubvolGetFlags, unsafe.Pointer(&f))
	return f, err
}

func subvolSetFlags(fd int, f uint64) error {
	return ioctl(fd, ioctlSubvolSetFlags, unsafe.Pointer(&f))
}

// setSubvolReadOnly sets or clears the read-only property of the subvolume fd.
func setSubvolReadOnly(fd int, ro bool) error {
	f, err := subvolGetFlags(fd)
	if err != nil {
		return err
	}
	nf := f &^ subvolRdonly
	if ro {
		nf |= subvolRdonly
	}
	if nf == f {
		return nil
	}
	return subvolSetFlags(fd, nf)
}

// quotaEnable turns quotas on: full qgroup accounting, or simple quotas
// when simple is set. On a file system whose quotas are on already it
// changes nothing (the kernel returns success and keeps the mode).
func quotaEnable(fd int, simple bool) error {
	a := quotaCtlArgs{cmd: quotaCtlEnable}
	if simple {
		a.cmd = quotaCtlEnableSimple
	}
	return ioctl(fd, ioctlQuotaCtl, unsafe.Pointer(&a))
}

// quotaSimple reports whether the quotas of fd's file system are simple
// quotas, from the qgroup status item's flags. It fails with errNoQgroup
// when quotas are off.
func quotaSimple(fd int) (bool, error) {
	item, err := searchQuotaItem(fd, qgroupStatusKey, 0)
	if err != nil {
		return false, err
	}
	if len(item) < qgroupStatusFlagsOffst+8 {
		return false, errNoQgroup
	}
	return binary.LittleEndian.Uint64(item[qgroupStatusFlagsOffst:])&qgroupStatusFlagSimple != 0, nil
}

func quotaRescanWait(fd int) error {
	return ioctl(fd, ioctlQuotaRescanWait, nil)
}

// qgroupLimitExcl limits the exclusive bytes of the subvolume fd's level-0
// qgroup; 0 removes the limit.
func qgroupLimitExcl(fd int, bytes uint64) error {
	a := qgroupLimitArgs{flags: qgroupLimitMaxExcl, maxExcl: bytes}
	if bytes == 0 {
		a.maxExcl = qgroupLimitClear
	}
	// qgroupid 0 means "the subvolume fd lives in".
	return ioctl(fd, ioctlQgroupLimit, unsafe.Pointer(&a))
}

// qgroupCreate creates qgroup id (level<<48 | n); EEXIST if it exists.
func qgroupCreate(fd int, id uint64) error {
	a := qgroupCreateArgs{create: 1, qgroupid: id}
	return ioctl(fd, ioctlQgroupCreate, unsafe.Pointer(&a))
}

// qgroupAssign makes qgroup src a member of qgroup dst; EEXIST if it is.
// The kernel marks the accounting inconsistent when it cannot update the
// parent's numbers at once: a rescan then makes them right.
func qgroupAssign(fd int, src, dst uint64) error {
	a := qgroupAssignArgs{assign: 1, src: src, dst: dst}
	return ioctl(fd, ioctlQgroupAssign, unsafe.Pointer(&a))
}

// quotaRescan starts a rescan of all qgroups; EINPROGRESS if one runs.
func quotaRescan(fd int) error {
	var a quotaRescanArgs
	return ioctl(fd, ioctlQuotaRescan, unsafe.Pointer(&a))
}

// qgroupLimitExclOf limits the exclusive bytes of qgroup id (any level);
// 0 removes the limit.
func qgroupLimitExclOf(fd int, id, bytes uint64) error {
	a := qgroupLimitArgs{qgroupid: id, flags: qgroupLimitMaxExcl, maxExcl: bytes}
	if bytes == 0 {
		a.maxExcl = qgroupLimitClear
	}
	return ioctl(fd, ioctlQgroupLimit, unsafe.Pointer(&a))
}

// metadataDup reports whether the file system of fd keeps its metadata
// twice (DUP): then every tree block the qgroups account takes twice its
// size on disk.
func metadataDup(fd int) (bool, error) {
	// btrfs_ioctl_space_args { space_slots, total_spaces } followed by
	// space_slots btrfs_ioctl_space_info { flags, total_bytes, used_bytes }.
	buf := make([]uint64, 2+3*16)
	buf[0] = 16
	if err := ioctl(fd, ioctlSpaceInfo, unsafe.Pointer(&buf[0])); err != nil {
		return false, err
	}
	n := min(buf[1], 16)
	for i := uint64(0); i < n; i++ {
		flags := buf[2+3*i]
		if flags&blockGroupMetadata != 0 && flags&blockGroupDup != 0 {
			return true, nil
		}
	}
	return false, nil
}

// fsUUID returns the file system id of fd's btrfs, as /sys/fs/btrfs names
// it (btrfs_ioctl_fs_info_args.fsid).
func fsUUID(fd int) (string, error) {
	var a [1024]byte
	if err := ioctl(fd, ioctlFSInfo, unsafe.Pointer(&a[0])); err != nil {
		return "", err
	}
	id := a[16:32]
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16]), nil
}

// subvolID returns the id of the subvolume that fd lives in.
func subvolID(fd int) (uint64, error) {
	a := inoLookupArgs{objectid: firstFreeObjectID}
	if err := ioctl(fd, ioctlInoLookup, unsafe.Pointer(&a)); err != nil {
		return 0, err
	}
	return a.treeid, nil
}

var errNoQgroup = errors.New("no qgroup info item")

// searchQuotaItem returns the item (0, typ, offset) of the quota tree.
func searchQuotaItem(fd int, typ uint32, offset uint64) ([]byte, error) {
	var a searchArgs
	a.key = searchKey{
		treeID:      quotaTreeObjectID,
		minObjectID: 0, maxObjectID: 0,
		minType: typ, maxType: typ,
		minOffset: offset, maxOffset: offset,
		maxTransid: ^uint64(0),
		nrItems:    1,
	}
	if err := ioctl(fd, ioctlTreeSearch, unsafe.Pointer(&a)); err != nil {
		return nil, err
	}
	if a.key.nrItems == 0 {
		return nil, errNoQgroup
	}
	le := binary.LittleEndian
	t := le.Uint32(a.buf[24:28])
	n := le.Uint32(a.buf[28:32])
	if t != typ || int(n) > len(a.buf)-searchHeaderSize {
		return nil, errNoQgroup
	}
	return a.buf[searchHeaderSize : searchHeaderSize+int(n)], nil
}

// qgroupExcl returns the exclusive bytes of qgroup 0/id as last committed.
// It fails with ENOENT when quotas are disabled.
func qgroupExcl(fd int, id uint64) (uint64, error) {
	item, err := searchQuotaItem(fd, qgroupInfoKey, id)
	if err != nil {
		return 0, err
	}
	if len(item) < qgroupInfoExclOffst+8 {
		return 0, errNoQgroup
	}
	return binary.LittleEndian.Uint64(item[qgroupInfoExclOffst:]), nil
}

// qgroupExclAll returns the exclusive bytes of every level-0 qgroup as
// last committed, by subvolume id, in one walk of the quota tree (a
// search returns as many items as fit in its 4 KiB buffer; the walk goes
// on from the last key).
func qgroupExclAll(fd int) (map[uint64]uint64, error) {
	out := make(map[uint64]uint64)
	le := binary.LittleEndian
	next := uint64(0)
	for {
		var a searchArgs
		a.key = searchKey{
			treeID:      quotaTreeObjectID,
			minObjectID: 0, maxObjectID: 0,
			minType: qgroupInfoKey, maxType: qgroupInfoKey,
			minOffset: next, maxOffset: 1<<qgroupLevelShift - 1,
			maxTransid: ^uint64(0),
			nrItems:    4096,
		}
		if err := ioctl(fd, ioctlTreeSearch, unsafe.Pointer(&a)); err != nil {
			return nil, err
		}
		if a.key.nrItems == 0 {
			return out, nil
		}
		off := 0
		last := uint64(0)
		for i := uint32(0); i < a.key.nrItems; i++ {
			if off+searchHeaderSize > len(a.buf) {
				break
			}
			h := a.buf[off : off+searchHeaderSize]
			offset := le.Uint64(h[16:24])
			typ := le.Uint32(h[24:28])
			n := int(le.Uint32(h[28:32]))
			off += searchHeaderSize
			if off+n > len(a.buf) {
				break
			}
			if typ == qgroupInfoKey && n >= qgroupInfoExclOffst+8 {
				out[offset] = le.Uint64(a.buf[off+qgroupInfoExclOffst:])
			}
			off += n
			last = offset
		}
		if last+1 >= 1<<qgroupLevelShift || last+1 <= next {
			return out, nil
		}
		next = last + 1
	}
}

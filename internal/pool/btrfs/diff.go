package btrfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/treediff"
)

// What changed between two read-only snapshots of one subvolume, in time
// proportional to the change (what `btrfs subvolume find-new` and the tree
// comparison of `btrfs send -p` rely on):
//
//   - Both snapshots are copies of the same source subvolume (same parent
//     uuid), the base taken first. Every tree block of the current
//     snapshot whose generation is older than the base's creation
//     transaction was written before the base was taken and is shared with
//     it unchanged: copy-on-write stamps every rewritten block with the
//     transaction that wrote it. A TREE_SEARCH with min_transid set to the
//     base's otransid therefore returns (at least) every item that was
//     added or changed since; the inodes those items belong to are the
//     changed set. A removed item rewrites its leaf and (for a directory
//     entry) the directory's own items, so deletions show as changed
//     directories. The search over-reports by up to a leaf's worth of
//     unchanged neighbours (all of a tree small enough to be one leaf,
//     which every snapshot rewrites) and by files that were only read
//     (relatime rewrites the inode item once after a change). Since every
//     change to an inode updates its ctime, an inode changed only if its
//     inode item is among the items returned and differs from the base's
//     (its transid and access time aside): one lookup per such inode.
//   - Changed byte ranges of a changed file are found by comparing its
//     EXTENT_DATA items in both trees: two ranges that point at the same
//     on-disk extent at the same offset hold the same bytes (an extent a
//     snapshot still references is never overwritten in place, not even in
//     a nodatacow file), inline extents are compared byte for byte, and
//     gaps are holes (zeros) on both sides.

// btrfs_ioctl_search_args_v2 header (its key, then buf_size); buf follows.
type searchArgsV2Head struct {
	key     searchKey
	bufSize uint64
}

// btrfs_ioctl_ino_path_args.
type inoPathArgs struct {
	inum     uint64
	size     uint64
	reserved [4]uint64
	fspath   uint64 // user pointer to a btrfs_data_container
}

// subvolInfoSize is sizeof(struct btrfs_ioctl_get_subvol_info_args).
const subvolInfoSize = 504

var (
	ioctlTreeSearchV2   = ioc(iocWrite|iocRead, 17, unsafe.Sizeof(searchArgsV2Head{}))
	ioctlInoPaths       = ioc(iocWrite|iocRead, 35, unsafe.Sizeof(inoPathArgs{}))
	ioctlGetSubvolInfo  = ioc(iocRead, 60, subvolInfoSize)
	errNotSnapshotPair  = errors.New("not two read-only snapshots of one subvolume")
	lastFreeObjectID    = ^uint64(0) - 255 // BTRFS_LAST_FREE_OBJECTID
	maxSearchBuf        = 64 << 10
	rootSubvolRdonlyBit = uint64(1) // BTRFS_ROOT_SUBVOL_RDONLY in the root item's flags
)

const (
	extentDataKey  = 108 // BTRFS_EXTENT_DATA_KEY
	fileExtentHead = 21  // offsetof(btrfs_file_extent_item, disk_bytenr)
	fileExtentSize = 53  // sizeof(btrfs_file_extent_item)
	extentInline   = 0   // BTRFS_FILE_EXTENT_INLINE
)

// subvolInfo is what the push needs of BTRFS_IOC_GET_SUBVOL_INFO.
type subvolInfo struct {
	treeID     uint64
	flags      uint64
	uuid       [16]byte
	parentUUID [16]byte
	otransid   uint64
}

func getSubvolInfo(fd int) (subvolInfo, error) {
	var a [subvolInfoSize]byte
	if err := ioctl(fd, ioctlGetSubvolInfo, unsafe.Pointer(&a[0])); err != nil {
		return subvolInfo{}, err
	}
	le := binary.LittleEndian
	// treeid u64, name[256], parent_id, dirid, generation, flags, uuid[16],
	// parent_uuid[16], received_uuid[16], ctransid, otransid, ...
	var s subvolInfo
	s.treeID = le.Uint64(a[0:])
	s.flags = le.Uint64(a[8+256+24:])
	copy(s.uuid[:], a[8+256+32:])
	copy(s.parentUUID[:], a[8+256+48:])
	s.otransid = le.Uint64(a[8+256+32+48+8:])
	return s, nil
}

// searchItem is one item a tree search returned.
type searchItem struct {
	objectID uint64
	typ      uint32
	offset   uint64
	data     []byte
}

// treeSearch calls fn for every item of tree treeID in the key range of
// key (min_transid applied), in key order. fn's data is valid during the
// call only.
func treeSearch(ctx context.Context, fd int, key searchKey, fn func(searchItem) error) error {
	return treeSearchBuf(ctx, fd, key, nil, fn)
}

// treeSearchBuf is treeSearch with a caller's buffer (nil: a new one).
func treeSearchBuf(ctx context.Context, fd int, key searchKey, buf []byte, fn func(searchItem) error) error {
	hs := int(unsafe.Sizeof(searchArgsV2Head{}))
	if len(buf) < hs+4096 {
		buf = make([]byte, hs+maxSearchBuf)
	}
	head := (*searchArgsV2Head)(unsafe.Pointer(&buf[0]))
	bufSize := uint64(len(buf) - hs)
	le := binary.LittleEndian
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		head.key = key
		head.key.nrItems = ^uint32(0)
		head.bufSize = bufSize
		if err := ioctl(fd, ioctlTreeSearchV2, unsafe.Pointer(&buf[0])); err != nil {
			return fmt.Errorf("tree search: %w", err)
		}
		n := head.key.nrItems
		if n == 0 {
			return nil
		}
		b := buf[unsafe.Sizeof(searchArgsV2Head{}):]
		var last searchItem
		for range n {
			// btrfs_ioctl_search_header: transid, objectid, offset, type, len.
			it := searchItem{objectID: le.Uint64(b[8:]), offset: le.Uint64(b[16:]), typ: le.Uint32(b[24:])}
			l := le.Uint32(b[28:])
			it.data = b[searchHeaderSize : searchHeaderSize+int(l)]
			if err := fn(it); err != nil {
				return err
			}
			last = it
			b = b[searchHeaderSize+int(l):]
		}
		// Next key after the last one returned.
		key.minObjectID, key.minType, key.minOffset = last.objectID, last.typ, last.offset+1
		if key.minOffset == 0 { // wrapped
			key.minType++
			if key.minType > 255 {
				key.minType = 0
				key.minObjectID++
				if key.minObjectID == 0 {
					return nil
				}
			}
		}
		if key.minObjectID > key.maxObjectID ||
			(key.minObjectID == key.maxObjectID && key.minType > key.maxType) {
			return nil
		}
	}
}

// snapDiff implements treediff.Diff for two snapshots of one subvolume.
type snapDiff struct {
	baseFD, curFD int
	base, cur     subvolInfo
	changed       map[uint64]bool
}

var _ treediff.Diff = (*snapDiff)(nil)

// Diff compares two read-only snapshots (host paths of datasets of this
// pool) of one subvolume, base first (see treediff.Differ).
func (p *Pool) Diff(ctx context.Context, base, cur string) (treediff.Diff, error) {
	return OpenDiff(ctx, base, cur)
}

var _ treediff.Differ = (*Pool)(nil)

// OpenDiff compares the read-only btrfs snapshots at base and cur, two
// snapshots of one subvolume, base taken first. Anything else fails,
// wrapping errs.ErrUnsupported.
func OpenDiff(ctx context.Context, base, cur string) (treediff.Diff, error) {
	d := &snapDiff{baseFD: -1, curFD: -1}
	fail := func(err error) (treediff.Diff, error) {
		d.Close()
		return nil, fmt.Errorf("compare snapshots %s and %s: %w", base, cur, err)
	}
	var err error
	if d.baseFD, err = openDir(base); err != nil {
		return fail(err)
	}
	if d.curFD, err = openDir(cur); err != nil {
		return fail(err)
	}
	var bs, cs unix.Statfs_t
	if err := unix.Fstatfs(d.baseFD, &bs); err != nil {
		return fail(err)
	}
	if err := unix.Fstatfs(d.curFD, &cs); err != nil {
		return fail(err)
	}
	if bs.Type != unix.BTRFS_SUPER_MAGIC || cs.Type != unix.BTRFS_SUPER_MAGIC {
		return fail(fmt.Errorf("not btrfs: %w", errs.ErrUnsupported))
	}
	// (statfs's fsid differs per subvolume: compare the file system's.)
	bu, err := fsUUID(d.baseFD)
	if err != nil {
		return fail(err)
	}
	cu, err := fsUUID(d.curFD)
	if err != nil {
		return fail(err)
	}
	if bu != cu {
		return fail(fmt.Errorf("different file systems: %w", errs.ErrUnsupported))
	}
	for _, fd := range []int{d.baseFD, d.curFD} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fail(err)
		}
		if st.Ino != firstFreeObjectID {
			return fail(fmt.Errorf("not a subvolume root: %w", errs.ErrUnsupported))
		}
	}
	if d.base, err = getSubvolInfo(d.baseFD); err != nil {
		return fail(fmt.Errorf("subvolume info: %w", err))
	}
	if d.cur, err = getSubvolInfo(d.curFD); err != nil {
		return fail(fmt.Errorf("subvolume info: %w", err))
	}
	var zero [16]byte
	switch {
	case d.base.flags&rootSubvolRdonlyBit == 0 || d.cur.flags&rootSubvolRdonlyBit == 0,
		d.base.parentUUID == zero || d.base.parentUUID != d.cur.parentUUID,
		d.base.treeID == d.cur.treeID,
		d.base.otransid > d.cur.otransid:
		return fail(fmt.Errorf("%w: %w", errNotSnapshotPair, errs.ErrUnsupported))
	}
	// Every item in a leaf of the current snapshot written after the
	// transaction that took the base. (That transaction's own writes are
	// all in the base: the snapshot is made in its commit, when no writer
	// can join it any more; later writes go to later transactions.)
	// Inodes whose inode item is in a leaf written since. Any change to an
	// inode (its content, size, mode, owners, xattrs, names, links, or a
	// directory's entries) updates its ctime, so rewrites its inode item:
	// an inode whose item is not among these, or is equal to the base's
	// but for the access time (reading a file rewrites it, once after a
	// change, under relatime), did not change. (A full walk trusts the
	// same: it reuses a file whose inode, size, mtime and ctime are equal.)
	items := map[uint64][]byte{}
	key := searchKey{treeID: d.cur.treeID, minObjectID: firstFreeObjectID, maxObjectID: lastFreeObjectID,
		maxOffset: ^uint64(0), minTransid: d.base.otransid + 1, maxTransid: ^uint64(0), maxType: 255}
	if err := treeSearch(ctx, d.curFD, key, func(it searchItem) error {
		if it.typ == inodeItemKey {
			items[it.objectID] = maskInodeItem(it.data)
		}
		return nil
	}); err != nil {
		return fail(err)
	}
	d.changed = map[uint64]bool{}
	// A small buffer for the lookups: the kernel faults in all of it on
	// every call.
	buf := make([]byte, unsafe.Sizeof(searchArgsV2Head{})+4096)
	// In inode order: the lookups then visit the base's leaves in order,
	// each once.
	inos := slices.Sorted(maps.Keys(items))
	for _, ino := range inos {
		cur := items[ino]
		var base []byte
		key := searchKey{treeID: d.base.treeID, minObjectID: ino, maxObjectID: ino, minType: inodeItemKey, maxType: inodeItemKey,
			maxTransid: ^uint64(0)}
		if err := treeSearchBuf(ctx, d.baseFD, key, buf, func(it searchItem) error {
			if it.objectID == ino && it.typ == inodeItemKey {
				base = maskInodeItem(it.data)
			}
			return nil
		}); err != nil {
			return fail(fmt.Errorf("inode %d in the base: %w", ino, err))
		}
		if base == nil || !bytes.Equal(base, cur) {
			d.changed[ino] = true
		}
	}
	return d, nil
}

// maskInodeItem copies an inode item without the fields that change when
// the file does not: the transaction that last wrote it, its access time.
func maskInodeItem(b []byte) []byte {
	b = slices.Clone(b)
	if len(b) >= inodeItemLen {
		clear(b[inodeTransidOff : inodeTransidOff+8])
		clear(b[inodeAtimeOff : inodeAtimeOff+inodeTimespecLen])
	}
	return b
}

// inode item fields that change without a change of the file: the
// transaction that last wrote the item, and the access time.
const (
	inodeItemKey     = 1   // BTRFS_INODE_ITEM_KEY
	inodeTransidOff  = 8   // offsetof(btrfs_inode_item, transid)
	inodeAtimeOff    = 112 // offsetof(btrfs_inode_item, atime)
	inodeTimespecLen = 12  // sizeof(btrfs_timespec)
	inodeItemLen     = 160 // sizeof(btrfs_inode_item)
)

func (d *snapDiff) Changed(ino uint64) bool { return d.changed[ino] }

func (d *snapDiff) ChangedPaths(ctx context.Context) ([]string, error) {
	var out []string
	for ino := range d.changed {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ps, err := inoPaths(d.curFD, ino)
		if err != nil {
			return nil, fmt.Errorf("paths of inode %d: %w", ino, err)
		}
		out = append(out, ps...)
	}
	return out, nil
}

// inoPaths lists every path of inode ino below the subvolume of fd
// (BTRFS_IOC_INO_PATHS); none for an inode that is gone or not linked.
func inoPaths(fd int, ino uint64) ([]string, error) {
	if ino == firstFreeObjectID {
		return []string{""}, nil
	}
	size := 4096
	for {
		buf := make([]uint64, size/8)
		a := inoPathArgs{inum: ino, size: uint64(size), fspath: uint64(uintptr(unsafe.Pointer(&buf[0])))}
		err := ioctl(fd, ioctlInoPaths, unsafe.Pointer(&a))
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		// btrfs_data_container: bytes_left, bytes_missing, elem_cnt,
		// elem_missed (u32 each), then val[]: offsets from val[0] to
		// NUL-terminated paths.
		missing := uint32(buf[0] >> 32)
		cnt := uint32(buf[1])
		missed := uint32(buf[1] >> 32)
		if (missing > 0 || missed > 0) && size < 16<<20 {
			size = max(size*2, size+int(missing)+64)
			continue
		}
		if missing > 0 || missed > 0 {
			return nil, fmt.Errorf("inode %d: too many paths", ino)
		}
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[2])), size-16)
		out := make([]string, 0, cnt)
		for i := range cnt {
			off := buf[2+i]
			if off >= uint64(len(raw)) {
				return nil, fmt.Errorf("inode %d: bad path offset", ino)
			}
			s := raw[off:]
			if j := bytes.IndexByte(s, 0); j >= 0 {
				s = s[:j]
			}
			out = append(out, string(s))
		}
		return out, nil
	}
}

func (d *snapDiff) BasePath(ctx context.Context, ino uint64) (string, bool, error) {
	if ino == firstFreeObjectID {
		return "", true, nil
	}
	a := inoLookupArgs{treeid: d.base.treeID, objectid: ino}
	err := ioctl(d.baseFD, ioctlInoLookup, unsafe.Pointer(&a))
	if errors.Is(err, unix.ENOENT) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("base path of inode %d: %w", ino, err)
	}
	p := a.name[:]
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	s := strings.TrimSuffix(string(p), "/")
	// The lookup names the inode's first link; it must be a directory
	// there (a file's inode number is no directory's).
	var st unix.Stat_t
	if s == "" {
		return "", false, nil
	}
	if err := statBeneath(d.baseFD, s, &st); err != nil || st.Ino != ino || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", false, nil
	}
	return s, true, nil
}

// statBeneath stats rel below dirfd without following symlinks.
func statBeneath(dirfd int, rel string, st *unix.Stat_t) error {
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

// extent is one file extent item reduced to what identifies its bytes.
type extent struct {
	off, end int64 // file range
	// id identifies the bytes: type, compression and encodings, disk
	// extent and the offset into it (or the inline bytes).
	id      string
	inExtOf int64 // offset into the extent of off (0 for inline)
}

func fileExtents(ctx context.Context, fd int, tree, ino uint64) ([]extent, error) {
	var out []extent
	le := binary.LittleEndian
	key := searchKey{treeID: tree, minObjectID: ino, maxObjectID: ino, minType: extentDataKey, maxType: extentDataKey,
		maxOffset: ^uint64(0), maxTransid: ^uint64(0)}
	err := treeSearch(ctx, fd, key, func(it searchItem) error {
		if it.typ != extentDataKey || it.objectID != ino {
			return nil
		}
		b := it.data
		if len(b) < fileExtentHead {
			return fmt.Errorf("inode %d: short extent item", ino)
		}
		off := int64(it.offset)
		typ := b[20]
		enc := string(b[16:21]) // compression, encryption, other_encoding, type
		if typ == extentInline {
			ram := int64(le.Uint64(b[8:]))
			out = append(out, extent{off: off, end: off + ram, id: "i" + enc + string(b[fileExtentHead:])})
			return nil
		}
		if len(b) < fileExtentSize {
			return fmt.Errorf("inode %d: short extent item", ino)
		}
		bytenr := le.Uint64(b[21:])
		inOff := int64(le.Uint64(b[37:]))
		n := int64(le.Uint64(b[45:]))
		if bytenr == 0 {
			return nil // an explicit hole: zeros, like a gap
		}
		id := fmt.Sprintf("e%x/%d/%d/%s", bytenr, le.Uint64(b[29:]), le.Uint64(b[8:]), enc)
		out = append(out, extent{off: off, end: off + n, id: id, inExtOf: inOff})
		return nil
	})
	return out, err
}

func (d *snapDiff) ChangedRanges(ctx context.Context, baseIno, curIno uint64) ([]treediff.Range, error) {
	old, err := fileExtents(ctx, d.baseFD, d.base.treeID, baseIno)
	if err != nil {
		return nil, fmt.Errorf("extents of inode %d in the base: %w", baseIno, err)
	}
	cur, err := fileExtents(ctx, d.curFD, d.cur.treeID, curIno)
	if err != nil {
		return nil, fmt.Errorf("extents of inode %d: %w", curIno, err)
	}
	return diffExtents(old, cur), nil
}

// diffExtents returns the file ranges where two extent maps differ.
func diffExtents(a, b []extent) []treediff.Range {
	// Breakpoints: every extent edge of either map.
	var pts []int64
	for _, e := range a {
		pts = append(pts, e.off, e.end)
	}
	for _, e := range b {
		pts = append(pts, e.off, e.end)
	}
	slices.Sort(pts)
	pts = slices.Compact(pts)
	at := func(m []extent, i *int, x int64) (string, int64) {
		for *i < len(m) && m[*i].end <= x {
			*i++
		}
		if *i < len(m) && m[*i].off <= x {
			e := m[*i]
			return e.id, e.inExtOf + (x - e.off)
		}
		return "", 0 // hole
	}
	var out []treediff.Range
	ia, ib := 0, 0
	for k := 0; k+1 < len(pts); k++ {
		x, y := pts[k], pts[k+1]
		ida, oa := at(a, &ia, x)
		idb, ob := at(b, &ib, x)
		if ida == idb && oa == ob {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Off+out[n-1].Len == x {
			out[n-1].Len += y - x
		} else {
			out = append(out, treediff.Range{Off: x, Len: y - x})
		}
	}
	return out
}

func (d *snapDiff) Close() error {
	for _, fd := range []int{d.baseFD, d.curFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	d.baseFD, d.curFD = -1, -1
	return nil
}

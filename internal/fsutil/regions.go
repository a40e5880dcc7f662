package fsutil

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"
)

// Region is a data region [Off, Off+Len) of a file.
type Region struct{ Off, Len int64 }

// DataRegions maps the data regions of the open file fd of the given size
// with SEEK_DATA/SEEK_HOLE and leaves the file offset at 0. sparse is false
// when the file has no hole (then regions is nil), or when the file system
// cannot tell (treated as dense).
func DataRegions(fd int, size int64) (regions []Region, sparse bool, err error) {
	var off, total int64
	for off < size {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, false, nil // no SEEK_DATA: dense
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, false, nil
		}
		end = min(end, size)
		if end <= start {
			break
		}
		regions = append(regions, Region{Off: start, Len: end - start})
		total += end - start
		off = end
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return nil, false, err
	}
	if total == size {
		return nil, false, nil
	}
	return regions, true, nil
}

package files

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/stead-dev/stead/internal/fsutil"
)

// segment is a data region [Off, Off+Len) of a sparse file.
type segment = fsutil.Region

// writeSparseMember writes a regular file with holes as a PAX GNU sparse
// 1.0 member (what `tar --sparse --format=pax` writes, and what
// archive/tar and GNU tar read back): a PAX header carrying
// GNU.sparse.{major,minor,name,realsize} plus hdr's own records, then a
// ustar header whose payload is the decimal segment map followed by the data
// segments only. archive/tar cannot write sparse files, so the member is
// written by hand between two entries of t.tw.
func (t *tarWriter) writeSparseMember(hdr *tar.Header, f *os.File, segs []segment, size int64) error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	// Like GNU tar, end the map with an empty segment at the real size when
	// the file ends in a hole, or GNU tar extracts it short.
	if len(segs) == 0 || segs[len(segs)-1].Off+segs[len(segs)-1].Len < size {
		segs = append(segs, segment{Off: size})
	}
	var mp bytes.Buffer
	fmt.Fprintf(&mp, "%d\n", len(segs))
	var dataLen int64
	for _, s := range segs {
		fmt.Fprintf(&mp, "%d\n%d\n", s.Off, s.Len)
		dataLen += s.Len
	}
	mp.Write(make([]byte, pad512(int64(mp.Len()))))
	payload := int64(mp.Len()) + dataLen

	recs := map[string]string{
		"GNU.sparse.major":    "1",
		"GNU.sparse.minor":    "0",
		"GNU.sparse.name":     hdr.Name,
		"GNU.sparse.realsize": strconv.FormatInt(size, 10),
		"mtime":               fmt.Sprintf("%d.%09d", hdr.ModTime.Unix(), hdr.ModTime.Nanosecond()),
		"atime":               fmt.Sprintf("%d.%09d", hdr.AccessTime.Unix(), hdr.AccessTime.Nanosecond()),
		"uid":                 strconv.Itoa(hdr.Uid),
		"gid":                 strconv.Itoa(hdr.Gid),
		"size":                strconv.FormatInt(payload, 10),
	}
	for k, v := range hdr.PAXRecords {
		recs[k] = v
	}
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var pax bytes.Buffer
	for _, k := range keys {
		pax.WriteString(paxRecord(k, recs[k]))
	}

	xblk, err := ustarBlock(&tar.Header{Name: "PaxHeaders.0/sparse", Mode: 0o644, Size: int64(pax.Len()), Typeflag: tar.TypeReg})
	if err != nil {
		return err
	}
	xblk[156] = tar.TypeXHeader
	setChecksum(xblk)
	// The ustar fields carry placeholders; the PAX records above win.
	fblk, err := ustarBlock(&tar.Header{Name: "GNUSparseFile.0/sparse", Mode: hdr.Mode, Typeflag: tar.TypeReg,
		ModTime: hdr.ModTime.Truncate(1e9)})
	if err != nil {
		return err
	}
	pax.Write(make([]byte, pad512(int64(pax.Len()))))
	for _, b := range [][]byte{xblk, pax.Bytes(), fblk, mp.Bytes()} {
		if _, err := t.w.Write(b); err != nil {
			return err
		}
	}
	for _, s := range segs {
		n, err := io.CopyBuffer(t.w, io.NewSectionReader(&ctxReaderAt{t: t, f: f}, s.Off, s.Len), t.buf)
		if err != nil {
			return err
		}
		if n < s.Len { // truncated while we read it: keep the archive valid
			if _, err := io.CopyBuffer(t.w, io.LimitReader(zeroReader{}, s.Len-n), t.buf); err != nil {
				return err
			}
		}
	}
	_, err = t.w.Write(make([]byte, pad512(payload)))
	return err
}

type ctxReaderAt struct {
	t *tarWriter
	f *os.File
}

func (c *ctxReaderAt) ReadAt(b []byte, off int64) (int, error) {
	if err := c.t.ctx.Err(); err != nil {
		return 0, err
	}
	return c.f.ReadAt(b, off)
}

func pad512(n int64) int64 { return (512 - n%512) % 512 }

// paxRecord formats one PAX record; its length prefix counts itself.
func paxRecord(k, v string) string {
	body := " " + k + "=" + v + "\n"
	n := len(body) + 1
	for len(strconv.Itoa(n))+len(body) != n {
		n = len(strconv.Itoa(n)) + len(body)
	}
	return strconv.Itoa(n) + body
}

// ustarBlock renders hdr as a single 512-byte ustar header block.
func ustarBlock(hdr *tar.Header) ([]byte, error) {
	var buf bytes.Buffer
	hdr.Format = tar.FormatUSTAR
	if err := tar.NewWriter(&buf).WriteHeader(hdr); err != nil {
		return nil, err
	}
	if buf.Len() != 512 {
		return nil, fmt.Errorf("ustar header is %d bytes", buf.Len())
	}
	return buf.Bytes(), nil
}

// setChecksum recomputes the ustar header checksum of blk.
func setChecksum(blk []byte) {
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		sum += int64(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

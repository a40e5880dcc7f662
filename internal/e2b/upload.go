package e2b

import (
	"compress/gzip"
	"fmt"
	"io"
	"mime"

	"github.com/stead-dev/stead/internal/errs"
)

// rawFilename returns the filename parameter of a Content-Disposition
// as sent: E2B's SDKs put the destination path there, which
// multipart.Part.FileName would cut down to its last element.
func rawFilename(cd string) string {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// gzipReader opens a gzip-encoded upload.
func gzipReader(r io.Reader) (io.Reader, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("gzip body: %v: %w", err, errs.ErrInvalid)
	}
	return zr, nil
}

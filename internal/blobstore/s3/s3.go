// Package s3 is the BlobStore on an S3-compatible object store (AWS S3,
// MinIO, versitygw, Ceph RGW, ...), through minio-go.
//
// Every object key k is stored as the S3 object <Prefix>/k in Bucket. S3
// gives the contract's atomicity itself: a PUT is visible entirely or not at
// all, and is durable once the server acknowledges it. Retries of transient
// network and server errors are minio-go's (up to 10, with backoff); every
// operation is idempotent, so retrying is safe.
package s3

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/errs"
)

// singlePutMax is the largest object sent in one PUT request; larger objects
// go up in parts, sized by minio-go.
const singlePutMax = 64 << 20

// Config says where the store lives and how to sign in.
type Config struct {
	// Endpoint is the server's host:port, without a scheme.
	Endpoint string
	// Bucket is the bucket's name; New creates it if it is missing.
	Bucket string
	// Prefix, if not empty, is prepended (with a '/') to every key, so
	// several stores can share one bucket. It must be a valid key.
	Prefix string
	// AccessKey and SecretKey are the credentials (S3 signature V4);
	// SessionToken goes with temporary ones.
	AccessKey, SecretKey, SessionToken string
	// CredentialSource says where Parse found the credentials (SourceURL,
	// "environment (VAR)", "file PATH [profile]"); for logs.
	CredentialSource string
	// Region is the bucket's region; empty asks the server (one extra
	// request per process).
	Region string
	// Secure selects HTTPS.
	Secure bool
	// SpoolDir is where objects written through Spool (packs, whose key
	// is known only once their bytes are) wait for their upload, as
	// unlinked temp files; empty: os.TempDir(). Put it on a disk, not a
	// tmpfs, or the bytes are in memory after all.
	SpoolDir string
}

// Location returns "s3://host:port/bucket/prefix", never the credentials.
func (c Config) Location() string {
	loc := "s3://" + c.Endpoint + "/" + c.Bucket
	if c.Prefix != "" {
		loc += "/" + c.Prefix
	}
	return loc
}

// Store is a BlobStore in an S3 bucket.
type Store struct {
	client   *minio.Client
	bucket   string
	prefix   string // "" or ends with '/'
	loc      string
	spoolDir string
}

var _ blobstore.BlobStore = (*Store)(nil)

// New connects to the server cfg names and creates the bucket if it is
// missing. It fails if the server is unreachable or the credentials are
// refused.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := validate(cfg); err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", cfg.Location(), err)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure: cfg.Secure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", cfg.Location(), err)
	}
	s := &Store{client: client, bucket: cfg.Bucket, loc: cfg.Location(), spoolDir: cfg.SpoolDir}
	if cfg.Prefix != "" {
		s.prefix = cfg.Prefix + "/"
	}
	exists, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: check bucket: %w", s.loc, err)
	}
	if !exists {
		err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if err != nil && !isCode(err, "BucketAlreadyOwnedByYou", "BucketAlreadyExists") {
			return nil, fmt.Errorf("open blob store %s: create bucket: %w", s.loc, err)
		}
	}
	return s, nil
}

func validate(cfg Config) error {
	switch {
	case cfg.Endpoint == "":
		return fmt.Errorf("no endpoint: %w", errs.ErrInvalid)
	case !ValidBucket(cfg.Bucket):
		return fmt.Errorf("bucket name %q: want 3-63 of [a-z0-9.-], starting and ending with a letter or digit: %w", cfg.Bucket, errs.ErrInvalid)
	case cfg.Prefix != "" && !blobstore.ValidKey(cfg.Prefix):
		return fmt.Errorf("prefix %q is not a valid key: %w", cfg.Prefix, errs.ErrInvalid)
	case cfg.AccessKey == "" || cfg.SecretKey == "":
		return fmt.Errorf("no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, STEAD_S3_ACCESS_KEY and STEAD_S3_SECRET_KEY, or a credentials file): %w", errs.ErrInvalid)
	}
	return nil
}

// ValidBucket reports whether name is a legal S3 bucket name: 3..63 bytes of
// lowercase letters, digits, '.' and '-', beginning and ending with a letter
// or digit, with no "..".
func ValidBucket(name string) bool {
	if len(name) < 3 || len(name) > 63 || strings.Contains(name, "..") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(name)-1 || c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// Location returns "s3://host:port/bucket/prefix".
func (s *Store) Location() string { return s.loc }

func (s *Store) object(key string) string { return s.prefix + key }

// Put uploads data in a single PUT up to 64 MiB, in parts above.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blobstore.CheckKey("put", key); err != nil {
		return err
	}
	if err := s.upload(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// upload sends size bytes of r as key: one PUT up to 64 MiB, parts above.
// r is seekable, so minio-go can resend it on a retry.
func (s *Store) upload(ctx context.Context, key string, r io.ReadSeeker, size int64) error {
	opts := minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: size <= singlePutMax,
	}
	if _, err := s.client.PutObject(ctx, s.bucket, s.object(key), r, size, opts); err != nil {
		return mapErr(err)
	}
	return nil
}

// Spool starts an object in an unlinked temp file in Config.SpoolDir (so
// a crash leaves nothing behind); Commit uploads it from there as Put
// does. dir is only checked: S3 has no directories to prepare.
func (s *Store) Spool(ctx context.Context, dir string) (blobstore.Spool, error) {
	if err := blobstore.CheckKey("spool", dir); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	f, err := os.CreateTemp(s.spoolDir, ".stead-spool-*")
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool %s: unlink temp file: %w", dir, err)
	}
	return &spool{s: s, f: f}, nil
}

var _ blobstore.Spooler = (*Store)(nil)

// spool is an unlinked temp file on its way to becoming an object.
type spool struct {
	s    *Store
	f    *os.File
	size int64
	done bool
}

func (sp *spool) Write(p []byte) (int, error) {
	if sp.done {
		return 0, fmt.Errorf("write spool: %w", os.ErrClosed)
	}
	n, err := sp.f.Write(p)
	sp.size += int64(n)
	return n, err
}

func (sp *spool) Commit(ctx context.Context, key string) error {
	if sp.done {
		return fmt.Errorf("commit %s: spool released: %w", key, os.ErrClosed)
	}
	defer sp.Abort()
	if err := blobstore.CheckKey("commit", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	if err := sp.s.upload(ctx, key, io.NewSectionReader(sp.f, 0, sp.size), sp.size); err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	return nil
}

func (sp *spool) Abort() {
	if !sp.done {
		sp.done = true
		sp.f.Close()
	}
}

// Get downloads the whole object.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := blobstore.CheckKey("get", key); err != nil {
		return nil, err
	}
	data, err := s.read(ctx, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return data, nil
}

// read fetches key with opts in one GET request and reads the whole body.
func (s *Store) read(ctx context.Context, key string, opts minio.GetObjectOptions) ([]byte, error) {
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, s.object(key), opts)
	if err != nil {
		return nil, mapErr(err)
	}
	defer body.Close()
	// info.Size is the response's Content-Length; net/http fails a body
	// that ends early. The extra bytes.MinRead lets ReadFrom see EOF without
	// growing the buffer.
	var buf bytes.Buffer
	buf.Grow(int(max(info.Size, 0)) + bytes.MinRead)
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, mapErr(err)
	}
	return buf.Bytes(), nil
}

// GetRange downloads length bytes at offset with one ranged GET.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	if err := blobstore.CheckRange(key, offset, length); err != nil {
		return nil, err
	}
	short := func(detail string) error {
		return fmt.Errorf("get range %s [%d,+%d): %s: %w", key, offset, length, detail, io.ErrUnexpectedEOF)
	}
	if length == 0 || offset > (1<<62)-length {
		// HTTP cannot ask for zero bytes, and a range ending past 2^62
		// cannot exist: answer from the object's size.
		info, err := s.Stat(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("get range: %w", err)
		}
		if offset > info.Size || length > info.Size-offset {
			return nil, short(fmt.Sprintf("object is %d bytes", info.Size))
		}
		return []byte{}, nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(offset, offset+length-1); err != nil {
		return nil, fmt.Errorf("get range %s: %w", key, err)
	}
	data, err := s.read(ctx, key, opts)
	if err != nil {
		if isCode(err, "InvalidRange") {
			return nil, short("range starts past the end of the object")
		}
		return nil, fmt.Errorf("get range %s: %w", key, err)
	}
	if int64(len(data)) != length {
		return nil, short(fmt.Sprintf("got %d bytes", len(data)))
	}
	return data, nil
}

// Stat returns the object's size (a HEAD request).
func (s *Store) Stat(ctx context.Context, key string) (blobstore.Info, error) {
	if err := blobstore.CheckKey("stat", key); err != nil {
		return blobstore.Info{}, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.object(key), minio.StatObjectOptions{})
	if err != nil {
		err = mapErr(err)
		if errors.Is(err, errs.ErrNotFound) {
			// A HEAD answer has no body, so a missing bucket looks like a
			// missing key: tell them apart with one more request, made only
			// on this path.
			if exists, berr := s.client.BucketExists(ctx, s.bucket); berr == nil && !exists {
				return blobstore.Info{}, fmt.Errorf("stat %s: bucket %s does not exist", key, s.bucket)
			}
		}
		return blobstore.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return blobstore.Info{Key: key, Size: info.Size}, nil
}

// List pages through ListObjectsV2; objects under the store's prefix whose
// names are not valid keys (written by something else) are left out.
func (s *Store) List(ctx context.Context, prefix string) ([]blobstore.Info, error) {
	if err := blobstore.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine on an early return
	out := []blobstore.Info{}
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.object(prefix), Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, mapErr(obj.Err))
		}
		key, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok || !blobstore.ValidKey(key) {
			continue
		}
		out = append(out, blobstore.Info{Key: key, Size: obj.Size})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	// S3 lists in UTF-8 byte order, which is Go's string order, but not
	// every S3-compatible server keeps to it.
	if !slices.IsSortedFunc(out, byKey) {
		slices.SortFunc(out, byKey)
	}
	return out, nil
}

func byKey(a, b blobstore.Info) int { return cmp.Compare(a.Key, b.Key) }

// Delete removes key; S3 answers success for an absent key too.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blobstore.CheckKey("delete", key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.object(key), minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(mapErr(err), errs.ErrNotFound) {
		return fmt.Errorf("delete %s: %w", key, mapErr(err))
	}
	return nil
}

// mapErr turns S3's "no such key" into errs.ErrNotFound and keeps everything
// else (a missing bucket included: that is a configuration error, not an
// absent object).
func mapErr(err error) error {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return err
	}
	if resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket {
		return fmt.Errorf("%s: %w", cmp.Or(resp.Code, resp.Message), errs.ErrNotFound)
	}
	return err
}

func isCode(err error, codes ...string) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && slices.Contains(codes, resp.Code)
}

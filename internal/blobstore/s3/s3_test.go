package s3_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/stead-dev/stead/internal/blobstore"
	"github.com/stead-dev/stead/internal/blobstore/blobstoretest"
	"github.com/stead-dev/stead/internal/blobstore/s3"
	"github.com/stead-dev/stead/internal/blobstore/s3/s3test"
	"github.com/stead-dev/stead/internal/errs"
)

func open(t *testing.T, cfg s3.Config) *s3.Store {
	t.Helper()
	s, err := s3.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// One server for the whole suite; each subtest gets a bucket of its own,
// alternately at the bucket's root and under a prefix.
func TestS3PassesBlobStoreContract(t *testing.T) {
	base := s3test.Start(t)
	n := 0
	blobstoretest.Run(t, func(t *testing.T) blobstore.BlobStore {
		n++
		cfg := base
		cfg.Bucket = fmt.Sprintf("%s-%d", base.Bucket, n)
		if n%2 == 0 {
			cfg.Prefix = "tenant/repo"
		}
		return open(t, cfg)
	})
}

func TestS3LocationNamesBucketAndPrefixButNoSecret(t *testing.T) {
	cfg := s3test.Start(t)
	cfg.Prefix = "p/q"
	s := open(t, cfg)
	if got, want := s.Location(), "s3://"+cfg.Endpoint+"/"+cfg.Bucket+"/p/q"; got != want {
		t.Fatalf("Location() = %q, want %q", got, want)
	}
}

// Two stores in one bucket under different prefixes never see each other's
// objects, and keys map to <prefix>/<key> in the bucket.
func TestS3PrefixesIsolateStoresSharingABucket(t *testing.T) {
	ctx := context.Background()
	cfg := s3test.Start(t)
	a, b, root := cfg, cfg, cfg
	a.Prefix, b.Prefix = "a", "a-b"
	sa, sb, sroot := open(t, a), open(t, b), open(t, root)
	if err := sa.Put(ctx, "k", []byte("A")); err != nil {
		t.Fatal(err)
	}
	if err := sb.Put(ctx, "k", []byte("B")); err != nil {
		t.Fatal(err)
	}
	if got, err := sa.Get(ctx, "k"); err != nil || string(got) != "A" {
		t.Fatalf("store a: %q, %v", got, err)
	}
	la, err := sa.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(la) != 1 || la[0].Key != "k" {
		t.Fatalf("store a lists %+v, want only k", la)
	}
	all, err := sroot.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, in := range all {
		keys = append(keys, in.Key)
	}
	if !slices.Equal(keys, []string{"a-b/k", "a/k"}) {
		t.Fatalf("bucket root lists %q, want [a-b/k a/k]", keys)
	}
}

func TestS3ListPagesBeyondOneThousandObjects(t *testing.T) {
	ctx := context.Background()
	s := open(t, s3test.Start(t))
	const n = 1205 // S3 returns at most 1000 keys per page
	for i := range n {
		if err := s.Put(ctx, fmt.Sprintf("many/%05d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List(ctx, "many/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("List = %d objects, want %d", len(list), n)
	}
	for i, in := range list {
		if want := fmt.Sprintf("many/%05d", i); in.Key != want {
			t.Fatalf("List[%d] = %q, want %q", i, in.Key, want)
		}
	}
}

// A missing bucket is a configuration error, not an absent object: mapping it
// to ErrNotFound would make a repository check report every pack missing.
func TestS3MissingBucketIsNotReportedAsNotFound(t *testing.T) {
	ctx := context.Background()
	cfg := s3test.Start(t)
	s := open(t, cfg)
	mc, err := minio.New(cfg.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), Region: cfg.Region})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.RemoveBucket(ctx, cfg.Bucket); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "k")
	if err == nil || errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Get with the bucket gone: err = %v, want an error other than not found", err)
	}
	_, err = s.Stat(ctx, "k")
	if err == nil || errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("Stat with the bucket gone: err = %v, want an error other than not found", err)
	}
}

func TestS3NewFailsWithWrongCredentials(t *testing.T) {
	cfg := s3test.Start(t)
	cfg.SecretKey = "wrong-" + cfg.SecretKey
	if _, err := s3.New(context.Background(), cfg); err == nil {
		t.Fatal("New with a wrong secret succeeded")
	}
}

func TestS3NewRejectsBadConfigWithoutNetwork(t *testing.T) {
	good := s3.Config{Endpoint: "127.0.0.1:1", Bucket: "bucket", AccessKey: "a", SecretKey: "s"}
	for name, mut := range map[string]func(*s3.Config){
		"no endpoint":    func(c *s3.Config) { c.Endpoint = "" },
		"bad bucket":     func(c *s3.Config) { c.Bucket = "Bad_Bucket" },
		"bad prefix":     func(c *s3.Config) { c.Prefix = "a//b" },
		"no credentials": func(c *s3.Config) { c.AccessKey = "" },
	} {
		cfg := good
		mut(&cfg)
		if _, err := s3.New(context.Background(), cfg); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

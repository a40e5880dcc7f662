package repo

import (
	"context"
	"testing"

	"github.com/stead-dev/stead/internal/blobstore/local"
	"github.com/stead-dev/stead/internal/repo/seal"
)

// newLocalRepo makes a repository on a local store in dir with a new
// master key (the internal tests' common start).
func newLocalRepo(t testing.TB, dir string) (*local.Store, seal.Key) {
	t.Helper()
	store, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	master, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := Init(context.Background(), store, master); err != nil {
		t.Fatal(err)
	}
	return store, master
}

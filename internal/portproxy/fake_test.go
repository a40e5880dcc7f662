package portproxy

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/stead-dev/stead/internal/errs"
)

// fakeBackend is a Backend of function fields; a nil field answers as
// for an unknown sandbox, an unknown key or a wrong token.
type fakeBackend struct {
	TargetFunc       func(ctx context.Context, sandboxID string, port int) (Target, error)
	AuthorizeFunc    func(ctx context.Context, key, sandboxID string) error
	CheckTokenFunc   func(sandboxID string, port int, token string) bool
	WakeFunc         func(ctx context.Context, sandboxID string) error
	NoteActivityFunc func(sandboxID string)
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Target(ctx context.Context, sandboxID string, port int) (Target, error) {
	if f.TargetFunc == nil {
		return Target{}, fmt.Errorf("sandbox %s: %w", sandboxID, errs.ErrNotFound)
	}
	return f.TargetFunc(ctx, sandboxID, port)
}

func (f *fakeBackend) Authorize(ctx context.Context, key, sandboxID string) error {
	if f.AuthorizeFunc == nil {
		return fmt.Errorf("key: %w", errs.ErrUnauthenticated)
	}
	return f.AuthorizeFunc(ctx, key, sandboxID)
}

func (f *fakeBackend) CheckToken(sandboxID string, port int, token string) bool {
	return f.CheckTokenFunc != nil && f.CheckTokenFunc(sandboxID, port, token)
}

func (f *fakeBackend) Wake(ctx context.Context, sandboxID string) error {
	if f.WakeFunc == nil {
		return nil
	}
	return f.WakeFunc(ctx, sandboxID)
}

func (f *fakeBackend) NoteActivity(sandboxID string) {
	if f.NoteActivityFunc != nil {
		f.NoteActivityFunc(sandboxID)
	}
}

// loopback is the address every test sandbox has.
func loopback() netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, 1}) }

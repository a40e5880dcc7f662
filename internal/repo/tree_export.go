package repo

import (
	"context"

	"github.com/stead-dev/stead/internal/repo/seal"
)

// Tree reads one directory tree blob of the scope (authenticated and validated).
func (s *Scope) Tree(ctx context.Context, id seal.ID) (*Tree, error) {
	if err := s.loadIndex(ctx); err != nil {
		return nil, err
	}
	return s.loadTree(ctx, id)
}

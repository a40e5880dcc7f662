package sandbox

import (
	"context"
	"fmt"
	"io"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// ExecInput runs a command in a running sandbox as Exec does with a
// stream, its standard input read from stdin as the command runs (until
// stdin ends) instead of req.Stdin's fixed bytes. It serves clients that
// keep a command's input open and write to it later (the E2B API's
// SendInput). Output goes to out (required); the result holds the exit.
func (s *Service) ExecInput(ctx context.Context, tenant, id string, req client.ExecRequest, stdin io.Reader, out api.ExecStream) (client.ExecResult, error) {
	if stdin == nil || out == nil {
		return client.ExecResult{}, fmt.Errorf("exec with input: stdin and out are required: %w", errs.ErrInvalid)
	}
	if req.Background || req.Stdin != "" {
		return client.ExecResult{}, fmt.Errorf("exec with input: neither background nor fixed stdin: %w", errs.ErrInvalid)
	}
	return s.exec(ctx, tenant, id, req, stdin, out)
}

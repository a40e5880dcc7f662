package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/internal/errs"
)

// HTTPStatus is the one place where errs sentinels become HTTP status codes.
// Anything it does not recognise is a 500.
func HTTPStatus(err error) int {
	var se huma.StatusError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &se):
		return se.GetStatus()
	case errors.Is(err, errs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, errs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errs.ErrInvalid):
		return http.StatusBadRequest
	case errors.As(err, new(*errs.QuotaError)): // a tenant's quota, not a full pool
		return http.StatusTooManyRequests
	case errors.Is(err, errs.ErrQuota):
		return http.StatusInsufficientStorage
	case errors.Is(err, errs.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, errs.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, errs.ErrBudget):
		// 402, not 429: retrying later does not help until someone raises
		// the cap (or the period ends), and a client must tell a spend cap
		// from a rate limit or a resource quota.
		return http.StatusPaymentRequired
	case errors.Is(err, errs.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// problem turns an error from the backend into the problem document sent
// to the caller. 4xx details carry the error text (written for users by the
// backend); a 500 is logged with its cause and answered generically so
// internals never leak.
func (s *server) problem(ctx context.Context, op string, err error) *huma.ErrorModel {
	status := HTTPStatus(err)
	var model *huma.ErrorModel
	if errors.As(err, &model) {
		return model
	}
	detail := errs.Message(err)
	tenant := ""
	if p, ok := PrincipalFromContext(ctx); ok {
		tenant = p.TenantID
	}
	switch status {
	case http.StatusInternalServerError:
		s.log.ErrorContext(ctx, "request failed", "op", op, "tenant", tenant, "err", err)
		detail = "internal error in " + op + "; the daemon log has the details"
	case http.StatusGatewayTimeout:
		s.log.WarnContext(ctx, "request timed out", "op", op, "tenant", tenant, "err", err)
		detail = op + " timed out: " + detail + "; retry later or with a longer timeout"
	case http.StatusServiceUnavailable:
		s.log.DebugContext(ctx, "request canceled", "op", op, "tenant", tenant, "err", err)
		detail = op + " was canceled (the client went away or the daemon is shutting down)"
	default:
		s.log.DebugContext(ctx, "request refused", "op", op, "tenant", tenant, "status", status, "err", err)
	}
	return &huma.ErrorModel{
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	}
}

// fail is what a huma handler returns for a backend error.
func (s *server) fail(ctx context.Context, op string, err error) error {
	if qe, ok := errs.AsQuota(err); ok {
		return quotaProblem(s.problem(ctx, op, err), qe)
	}
	return s.problem(ctx, op, err)
}

// logLevelFor is used by stream handlers that can no longer send a status.
func logLevelFor(err error) slog.Level {
	if HTTPStatus(err) >= 500 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

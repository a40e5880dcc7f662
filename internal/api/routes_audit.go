package api

import "net/http"

// registerAuditRoutes adds the audit routes when the backend serves them.
// (Filled in by the audit work.)
func (s *server) registerAuditRoutes(b Backend) {}

// auditRequests records state-changing requests in the audit trail.
// (Filled in by the audit work.)
func (s *server) auditRequests(h http.Handler) http.Handler { return h }

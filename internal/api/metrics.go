package api

import (
	"net/http"
	"strings"
)

// routeTemplate is the route template a request matches ("/v1/sandboxes/{id}"),
// never its raw path, so the request metrics have one series per route;
// "unmatched" when no route matches.
func (s *server) routeTemplate(r *http.Request) string {
	if s.mux == nil {
		return "unmatched"
	}
	_, pat := s.mux.Handler(r)
	if pat == "" {
		return "unmatched"
	}
	if _, path, ok := strings.Cut(pat, " "); ok {
		return path // the method is a label of its own
	}
	return pat
}

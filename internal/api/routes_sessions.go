package api

// registerSessionRoutes adds the session-log routes when the backend
// serves them. (Filled in by the session-log work.)
func (s *server) registerSessionRoutes(b Backend) {}

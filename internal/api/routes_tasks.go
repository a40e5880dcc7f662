package api

// registerTaskRoutes adds the structured-state routes (tasks,
// observations, key-value) when the backend serves them. (Filled in by the
// structured-state work.)
func (s *server) registerTaskRoutes(b Backend) {}

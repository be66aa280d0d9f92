package httpapi

import "net/http"

// Authorized reports whether r carries the operator's API key (for routes
// served outside this router, such as the load-balancing proxy).
func (s *Server) Authorized(r *http.Request) bool { return s.isAdmin(apiKey(r)) }

package httpapi

// mgmt's hooks: an endpoint created, changed or deleted through any
// surface drops the job API's cached copy and tells the runtime.

// EndpointChanged is mgmt's hook for a created or changed endpoint.
func (s *Server) EndpointChanged(id string) {
	s.forgetEndpoint(id)
	if s.cfg.EndpointChanged != nil {
		s.cfg.EndpointChanged(id)
	}
}

// EndpointDeleted is mgmt's hook for a deleted endpoint (mgmt has
// cancelled its jobs through the queue): the runtime is told.
func (s *Server) EndpointDeleted(id string) {
	s.forgetEndpoint(id)
	if s.cfg.Metrics != nil {
		// Its series go now; a job finishing later is pruned by the
		// cleaner (Metrics.PruneEndpoints).
		s.cfg.Metrics.ForgetEndpoint(id)
	}
	if s.cfg.EndpointDeleted != nil {
		s.cfg.EndpointDeleted(id)
	}
}

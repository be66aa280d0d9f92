package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/graphqlapi"
)

// graphqlRoute mounts POST /graphql (berth/graphqlapi) behind the key; the
// key may also come as ?api_key=, as in RunPod's GraphQL docs. The schema
// is checked against its resolvers here: a mismatch is a programming error.
func (s *Server) graphqlRoute(r *mux.Router, admin func(name string, h http.HandlerFunc) http.Handler) {
	gql, err := graphqlapi.New(graphqlapi.Config{Mgmt: s.mg, Logger: s.cfg.Logger, Clock: s.cfg.Clock, GPUs: s.cfg.GPUs,
		Workers: s.graphqlWorkers})
	if err != nil {
		panic(err)
	}
	r.Handle("/graphql", graphqlapi.KeyFromQuery(admin("graphql", gql.ServeHTTP))).Methods(http.MethodPost)
}

// graphqlWorkers is an endpoint's workers as includeWorkers shows them.
func (s *Server) graphqlWorkers(endpointID string) []graphqlapi.Worker {
	e, err := s.endpoint(endpointID)
	if err != nil {
		return nil
	}
	var out []graphqlapi.Worker
	for _, w := range s.v1.EndpointWorkers(e) {
		out = append(out, graphqlapi.Worker{ID: w.ID, Name: w.Name, DesiredStatus: w.DesiredStatus, State: w.State,
			ImageName: w.ImageName, GPUCount: w.GPUCount, VCPUCount: w.VCPUCount, Version: w.SlsVersion, LastStartedAt: w.LastStartedAt})
	}
	return out
}

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
		Workers: s.workers, Models: s.cfg.Models, Limits: s.cfg.GraphQL})
	if err != nil {
		panic(err)
	}
	r.Handle("/graphql", graphqlapi.KeyFromQuery(admin("graphql", gql.ServeHTTP))).Methods(http.MethodPost)
}

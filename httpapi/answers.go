package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"berth/httplimit"
)

// Answers that grow with the data — an endpoint's job list (inputs and
// outputs up to v1api's 32 MiB per list), pod lists, billing — are built
// in memory, so how many are built at once is bounded, as GraphQL's
// in-flight fields are (graphqlapi.Limits.InFlight): each holds shares of
// Config.ListShares while it is built, a job list 8, the others 1. One
// that finds no room waits up to Config.ListWait, then is answered 503
// with Retry-After.
var listShares = map[string]int64{
	"endpoints.jobs": 8,
	"pods.list":      1, "v2.listPods": 1,
	"billing.pods": 1, "billing.endpoints": 1, "billing.networkvolumes": 1,
	"v2.listBilling": 1, "v2.listPodBilling": 1, "v2.listServerlessBilling": 1,
	"v2.listEndpointBilling": 1, "v2.listNetworkVolumeBilling": 1, "v2.listClusterBilling": 1,
}

// gateList bounds route's answers when it is one of listShares'. Requests
// without a key pass to the handler's own refusal, holding nothing.
func (s *Server) gateList(route string, h http.Handler) http.Handler {
	n := listShares[route]
	if n == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if principal(r) == nil {
			h.ServeHTTP(w, r)
			return
		}
		if !s.lists.Acquire(r.Context(), n, s.cfg.ListWait) {
			if r.Context().Err() != nil {
				return
			}
			w.Header().Set("Retry-After", "1")
			writeErr(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
				"server busy: the lists being built (job lists, pods, billing) hold all %d shares Berth allows at once, and this one waited %s; retry in a moment",
				s.lists.Capacity(), s.cfg.ListWait))
			return
		}
		defer s.lists.Release(n)
		h.ServeHTTP(w, r)
	})
}

func newListGate(shares int) *httplimit.Gate { return httplimit.NewGate(int64(shares)) }

const (
	defaultListShares = 64
	defaultListWait   = 2 * time.Second
)

package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"berth/httpapi"
	"berth/lbproxy"
	"berth/runtime"
	"berth/store"
)

// newBalancer builds the load-balancing proxy. The supervisor and the API
// are bound later (the supervisor is made with the balancer's queue view).
// BERTH_LB_DOMAIN (default lb.localhost) is the domain of Host addressing
// (ENDPOINT_ID.<domain>); BERTH_LB_TIMEOUT (a Go duration, default 5m30s)
// bounds the wait for a worker's response headers.
func newBalancer(log *slog.Logger, db *store.DB, sup *atomic.Pointer[runtime.Supervisor], api *atomic.Pointer[httpapi.Server]) *lbproxy.Balancer {
	timeout, _ := time.ParseDuration(os.Getenv("BERTH_LB_TIMEOUT"))
	domain := os.Getenv("BERTH_LB_DOMAIN")
	if domain == "" {
		domain = "lb.localhost"
	}
	return lbproxy.New(lbproxy.Config{
		Logger: log, Domain: domain, Timeout: timeout,
		Endpoint: func(id string) (store.Endpoint, error) {
			var e store.Endpoint
			return e, db.View(func(tx *store.Tx) error { return tx.Get(store.Endpoints, id, &e) })
		},
		WorkerNet: func(ctx context.Context, id string) (lbproxy.WorkerNet, error) {
			s := sup.Load()
			if s == nil {
				return lbproxy.WorkerNet{}, context.Canceled
			}
			n, err := s.WorkerNet(ctx, id)
			return lbproxy.WorkerNet{IP: n.IP, Env: n.Env}, err
		},
		Wake: func(ep string) {
			if s := sup.Load(); s != nil {
				s.Notify(ep)
			}
		},
		Authorize: func(r *http.Request) bool {
			a := api.Load()
			return a != nil && a.Authorized(r)
		},
	})
}

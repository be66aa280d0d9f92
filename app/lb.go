package app

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"

	"berth/httpapi"
	"berth/lbproxy"
	"berth/runtime"
	"berth/store"
)

// newBalancer builds the load-balancing proxy over cfg.LB's settings
// (Domain [lb.localhost]: ENDPOINT_ID.<domain> in Host addresses an
// endpoint). The supervisor and the API are bound later: the supervisor is
// made with the balancer's queue view.
func (a *App) newBalancer(log *slog.Logger, sup *atomic.Pointer[runtime.Supervisor], api *atomic.Pointer[httpapi.Server]) *lbproxy.Balancer {
	c := a.cfg.LB
	if c.Domain == "" {
		c.Domain = "lb.localhost"
	}
	db := a.db
	c.Logger = log
	c.Endpoint = func(id string) (store.Endpoint, error) {
		var e store.Endpoint
		return e, db.View(func(tx *store.Tx) error { return tx.Get(store.Endpoints, id, &e) })
	}
	c.WorkerNet = func(ctx context.Context, id string) (lbproxy.WorkerNet, error) {
		s := sup.Load()
		if s == nil {
			return lbproxy.WorkerNet{}, context.Canceled
		}
		n, err := s.WorkerNet(ctx, id)
		return lbproxy.WorkerNet{IP: n.IP, Env: n.Env}, err
	}
	c.Wake = func(ep string) {
		if s := sup.Load(); s != nil {
			s.Notify(ep)
		}
	}
	c.Authorize = func(r *http.Request, endpointID string) (int, string) {
		s := api.Load()
		if s == nil {
			return http.StatusServiceUnavailable, "Berth is starting"
		}
		return s.AuthorizeEndpoint(r, endpointID)
	}
	return lbproxy.New(c)
}

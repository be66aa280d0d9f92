package v1api

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"berth/worker"
)

// workerEnv registers a worker for a process outside Docker and returns the
// environment the runpod-python SDK needs, URL templates exactly as the SDK
// substitutes them (each already holds a '?', since the SDK appends '&…').
func (a *API) workerEnv(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["endpointId"]
	if _, ok := a.endpoint(w, r, id); !ok {
		return
	}
	reg, err := a.cfg.Queue.RegisterWorker(id, true)
	if err != nil {
		a.internal(w, r, err)
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host
	if v := r.URL.Query().Get("baseUrl"); v != "" {
		base = strings.TrimRight(v, "/")
	}
	writeJSON(w, http.StatusOK, worker.PlatformEnv(base, id, reg.WorkerID, reg.Key, a.cfg.PingInterval.Milliseconds()))
}

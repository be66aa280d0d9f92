package v1api

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/v1input"
)

// Pods: the rules and desiredStatus transitions are in mgmt/pods.go; the
// views (includes, filters) in podviews.go.

func (a *API) createPod(w http.ResponseWriter, r *http.Request) {
	var in v1input.PodInput
	if !decodeBody(w, r, &in) {
		return
	}
	p, err := a.cfg.Mgmt.CreatePod(r.Context(), in.Mgmt())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writePod(w, r, http.StatusCreated, p, nil)
}

// podAction is POST /pods/{podId}/start|stop|reset|restart.
func (a *API) podAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := a.cfg.Mgmt.DoPodAction(r.Context(), mux.Vars(r)["podId"], action)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		a.writePod(w, r, http.StatusOK, p, nil)
	}
}

// updatePod is PATCH and POST …/update (PodUpdateInput).
func (a *API) updatePod(w http.ResponseWriter, r *http.Request) {
	var in v1input.PodUpdateInput
	if !decodeBody(w, r, &in) {
		return
	}
	p, err := a.cfg.Mgmt.UpdatePod(r.Context(), mux.Vars(r)["podId"], in.PodFields.Mgmt())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writePod(w, r, http.StatusOK, p, nil)
}

// deletePod terminates a pod (container, pod volume and record).
func (a *API) deletePod(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeletePod(r.Context(), mux.Vars(r)["podId"]))
}

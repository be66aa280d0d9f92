package v1api

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/series"
)

// seriesView is GET /v1/endpoints/{endpointId}/metrics: the endpoint's
// last hour or day as the dashboard plots it (package series).
type seriesView struct {
	EndpointID string `json:"endpointId"`
	series.View
}

func (a *API) getSeries(w http.ResponseWriter, r *http.Request) {
	win, err := series.ParseWindow(r.URL.Query().Get("window"))
	if err != nil {
		a.fail(w, r, bad("%v", err))
		return
	}
	e, ok := a.endpoint(w, r, mux.Vars(r)["endpointId"])
	if !ok {
		return
	}
	if a.cfg.Series == nil {
		writeErr(w, http.StatusServiceUnavailable, "this server keeps no series")
		return
	}
	writeJSON(w, http.StatusOK, seriesView{EndpointID: e.ID, View: a.cfg.Series(e.ID, win)})
}

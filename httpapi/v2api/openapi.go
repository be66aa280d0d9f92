package v2api

import "net/http"

func (a *API) openapi(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.document())
}

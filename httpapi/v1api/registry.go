package v1api

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/v1input"
)

// Container registry auths. The password is stored in the database file
// (mode 0600, in a 0700 data directory) and never returned or logged; the
// runtime reads it with store.RegistryCredentials.

func (a *API) createRegistryAuth(w http.ResponseWriter, r *http.Request) {
	var in v1input.RegistryAuthInput
	if !decodeBody(w, r, &in) {
		return
	}
	ra, err := a.cfg.Mgmt.CreateRegistryAuth(r.Context(), in.Mgmt())
	a.answer(w, r, http.StatusOK, ra, err)
}

func (a *API) listRegistryAuths(w http.ResponseWriter, r *http.Request) {
	as, err := a.cfg.Mgmt.ListRegistryAuths(r.Context())
	a.answer(w, r, http.StatusOK, as, err)
}

func (a *API) getRegistryAuth(w http.ResponseWriter, r *http.Request) {
	ra, err := a.cfg.Mgmt.GetRegistryAuth(r.Context(), mux.Vars(r)["containerRegistryAuthId"])
	a.answer(w, r, http.StatusOK, ra, err)
}

// deleteRegistryAuth: mgmt refuses while a pod pulls with it.
func (a *API) deleteRegistryAuth(w http.ResponseWriter, r *http.Request) {
	err := a.cfg.Mgmt.DeleteRegistryAuth(r.Context(), mux.Vars(r)["containerRegistryAuthId"])
	a.answer(w, r, http.StatusNoContent, nil, err)
}

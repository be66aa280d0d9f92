package v1api

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/v1input"
)

// Network volumes: see mgmt/volumes.go.

func (a *API) createVolume(w http.ResponseWriter, r *http.Request) {
	var in v1input.VolumeInput
	if !decodeBody(w, r, &in) {
		return
	}
	v, err := a.cfg.Mgmt.CreateVolume(r.Context(), in.Mgmt())
	a.answer(w, r, http.StatusOK, v, err)
}

func (a *API) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := a.cfg.Mgmt.ListVolumes(r.Context())
	a.answer(w, r, http.StatusOK, vs, err)
}

func (a *API) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := a.cfg.Mgmt.GetVolume(r.Context(), mux.Vars(r)["networkVolumeId"])
	a.answer(w, r, http.StatusOK, v, err)
}

// updateVolume renames or grows a volume.
func (a *API) updateVolume(w http.ResponseWriter, r *http.Request) {
	var in v1input.VolumeInput
	if !decodeBody(w, r, &in) {
		return
	}
	v, err := a.cfg.Mgmt.UpdateVolume(r.Context(), mux.Vars(r)["networkVolumeId"], in.Mgmt())
	a.answer(w, r, http.StatusOK, v, err)
}

// deleteVolume removes a volume and its files; refused while attached.
func (a *API) deleteVolume(w http.ResponseWriter, r *http.Request) {
	err := a.cfg.Mgmt.DeleteVolume(r.Context(), mux.Vars(r)["networkVolumeId"])
	a.answer(w, r, http.StatusNoContent, nil, err)
}

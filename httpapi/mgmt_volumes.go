package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/mgmt"
)

// Network volumes: see mgmt/volumes.go.

// VolumeInput is NetworkVolumeCreateInput and NetworkVolumeUpdateInput.
type VolumeInput struct {
	Name         *string `json:"name"`
	Size         *int    `json:"size"`
	DataCenterID *string `json:"dataCenterId"`
}

// VolumePath is the host directory of network volume id under dataDir; the
// runtime mounts it into containers.
func VolumePath(dataDir, id string) string { return mgmt.VolumePath(dataDir, id) }

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var in VolumeInput
	if !decodeBody(w, r, &in) {
		return
	}
	v, err := s.mg.CreateVolume(r.Context(), mgmt.VolumeInput{Name: in.Name, Size: in.Size, DataCenterID: in.DataCenterID})
	s.answer(w, r, http.StatusOK, v, err)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := s.mg.ListVolumes(r.Context())
	s.answer(w, r, http.StatusOK, vs, err)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.mg.GetVolume(r.Context(), mux.Vars(r)["networkVolumeId"])
	s.answer(w, r, http.StatusOK, v, err)
}

// updateVolume renames or grows a volume.
func (s *Server) updateVolume(w http.ResponseWriter, r *http.Request) {
	var in VolumeInput
	if !decodeBody(w, r, &in) {
		return
	}
	v, err := s.mg.UpdateVolume(r.Context(), mux.Vars(r)["networkVolumeId"], mgmt.VolumeInput{Name: in.Name, Size: in.Size, DataCenterID: in.DataCenterID})
	s.answer(w, r, http.StatusOK, v, err)
}

// deleteVolume removes a volume and its files; refused while attached.
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	err := s.mg.DeleteVolume(r.Context(), mux.Vars(r)["networkVolumeId"])
	s.answer(w, r, http.StatusNoContent, nil, err)
}

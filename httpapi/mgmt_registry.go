package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/mgmt"
)

// Container registry auths. The password is stored in the database file
// (mode 0600, in a 0700 data directory) and never returned or logged; the
// runtime reads it with store.RegistryCredentials.

// RegistryAuthInput is ContainerRegistryAuthCreateInput.
type RegistryAuthInput struct {
	Name     *string `json:"name"`
	Username *string `json:"username"`
	Password *string `json:"password"`
}

func (s *Server) createRegistryAuth(w http.ResponseWriter, r *http.Request) {
	var in RegistryAuthInput
	if !decodeBody(w, r, &in) {
		return
	}
	a, err := s.mg.CreateRegistryAuth(r.Context(), mgmt.RegistryAuthInput(in))
	s.answer(w, r, http.StatusOK, a, err)
}

func (s *Server) listRegistryAuths(w http.ResponseWriter, r *http.Request) {
	as, err := s.mg.ListRegistryAuths(r.Context())
	s.answer(w, r, http.StatusOK, as, err)
}

func (s *Server) getRegistryAuth(w http.ResponseWriter, r *http.Request) {
	a, err := s.mg.GetRegistryAuth(r.Context(), mux.Vars(r)["containerRegistryAuthId"])
	s.answer(w, r, http.StatusOK, a, err)
}

// deleteRegistryAuth refuses while a template or pod pulls with it.
func (s *Server) deleteRegistryAuth(w http.ResponseWriter, r *http.Request) {
	err := s.mg.DeleteRegistryAuth(r.Context(), mux.Vars(r)["containerRegistryAuthId"])
	s.answer(w, r, http.StatusNoContent, nil, err)
}

package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/mgmt"
)

// Templates: list, get, update, delete (create is in mgmt.go).

var templateFlags = []string{"includeEndpointBoundTemplates", "includePublicTemplates", "includeRunpodTemplates"}

// templateID returns the path's template id, answering 400 for one that
// cannot be a template id (GetTemplate's "invalid ID supplied").
func (s *Server) templateID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := mux.Vars(r)["templateId"]
	if err := mgmt.CheckTemplateID(id); err != nil {
		s.mgmtErr(w, r, err)
		return "", false
	}
	return id, true
}

// listTemplates lists the operator's templates; see mgmt.ListTemplates.
// Berth has no public or official templates, so those flags change nothing.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, templateFlags...)
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	ts, err := s.mg.ListTemplates(r.Context(), mgmt.TemplateFilter{IncludeEndpointBound: flags["includeEndpointBoundTemplates"]})
	s.answer(w, r, http.StatusOK, ts, err)
}

// getTemplate returns one template. The include flags are checked but a
// template asked for by id is always returned: they widen a search, and
// every Berth template is the operator's own.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.templateID(w, r)
	if !ok {
		return
	}
	if _, err := queryBools(r, templateFlags...); err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	t, err := s.mg.GetTemplate(r.Context(), id)
	s.answer(w, r, http.StatusOK, t, err)
}

// updateTemplate is PATCH and POST …/update (TemplateUpdateInput).
func (s *Server) updateTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.templateID(w, r)
	if !ok {
		return
	}
	var in TemplateInput
	if !decodeBody(w, r, &in) {
		return
	}
	t, err := s.mg.UpdateTemplate(r.Context(), id, in.mgmt())
	s.answer(w, r, http.StatusOK, t, err)
}

// deleteTemplate refuses while an endpoint or pod uses the template.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.templateID(w, r)
	if !ok {
		return
	}
	s.answer(w, r, http.StatusNoContent, nil, s.mg.DeleteTemplate(r.Context(), id))
}

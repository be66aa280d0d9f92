package v1api

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/mgmt"
	"berth/v1input"
)

// Templates: list, get, update, delete (create is in api.go).

var templateFlags = []string{"includeEndpointBoundTemplates", "includePublicTemplates", "includeRunpodTemplates"}

// templateID returns the path's template id, answering 400 for one that
// cannot be a template id (GetTemplate's "invalid ID supplied").
func (a *API) templateID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := mux.Vars(r)["templateId"]
	if err := mgmt.CheckTemplateID(id); err != nil {
		a.fail(w, r, err)
		return "", false
	}
	return id, true
}

// listTemplates lists the operator's templates; see mgmt.ListTemplates.
// Berth has no public or official templates, so those flags change nothing.
func (a *API) listTemplates(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, templateFlags...)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ts, err := a.cfg.Mgmt.ListTemplates(r.Context(), mgmt.TemplateFilter{IncludeEndpointBound: flags["includeEndpointBoundTemplates"]})
	a.answer(w, r, http.StatusOK, ts, err)
}

// getTemplate returns one template. The include flags are checked but a
// template asked for by id is always returned: they widen a search, and
// every Berth template is the operator's own.
func (a *API) getTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := a.templateID(w, r)
	if !ok {
		return
	}
	if _, err := queryBools(r, templateFlags...); err != nil {
		a.fail(w, r, err)
		return
	}
	t, err := a.cfg.Mgmt.GetTemplate(r.Context(), id)
	a.answer(w, r, http.StatusOK, t, err)
}

// updateTemplate is PATCH and POST …/update (TemplateUpdateInput).
func (a *API) updateTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := a.templateID(w, r)
	if !ok {
		return
	}
	var in v1input.TemplateInput
	if !decodeBody(w, r, &in) {
		return
	}
	// v1's TemplateUpdateInput has neither field (REST v2 changes them).
	for name, given := range map[string]bool{"category": in.Category != nil, "isServerless": in.IsServerless != nil} {
		if given {
			a.fail(w, r, bad("unknown field %q: v1's template update (TemplateUpdateInput) has no %s; PATCH /v2/templates/{id} changes it", name, name))
			return
		}
	}
	t, err := a.cfg.Mgmt.UpdateTemplate(r.Context(), id, in.Mgmt())
	a.answer(w, r, http.StatusOK, t, err)
}

// deleteTemplate refuses while an endpoint or pod uses the template.
func (a *API) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := a.templateID(w, r)
	if !ok {
		return
	}
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteTemplate(r.Context(), id))
}

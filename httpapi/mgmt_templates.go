package httpapi

import (
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/store"
)

// Templates: list, get, update, delete (create is in mgmt.go).

// templateIDRe is the shape of a template id: 10 lowercase alphanumerics,
// as queue.NewID(10) makes them and RunPod shows them ("30zmvf89kd").
var templateIDRe = regexp.MustCompile(`^[a-z0-9]{10}$`)

var templateFlags = []string{"includeEndpointBoundTemplates", "includePublicTemplates", "includeRunpodTemplates"}

// templateID returns the path's template id, answering 400 for one that
// cannot be a template id (GetTemplate's "invalid ID supplied").
func templateID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := mux.Vars(r)["templateId"]
	if !templateIDRe.MatchString(id) {
		writeErr(w, r, http.StatusBadRequest, "invalid template id "+quote(id)+": a template id is 10 lowercase letters or digits")
		return "", false
	}
	return id, true
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// listTemplates lists the operator's templates. Templates used by an
// endpoint are left out unless includeEndpointBoundTemplates=true, as
// RunPod does; Berth has no public templates of other users and no
// official ones, so the other two flags change nothing.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, templateFlags...)
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	var ts []store.Template
	bound := map[string]bool{}
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		eps, err := all[store.Endpoint](tx, store.Endpoints)
		if err != nil {
			return err
		}
		for _, e := range eps {
			bound[e.TemplateID] = true
		}
		ts, err = all[store.Template](tx, store.Templates)
		return err
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := make([]store.Template, 0, len(ts))
	for _, t := range ts {
		if bound[t.ID] && !flags["includeEndpointBoundTemplates"] {
			continue
		}
		out = append(out, t)
	}
	byCreated(out, func(t store.Template) time.Time { return t.CreatedAt }, func(t store.Template) string { return t.ID })
	writeJSON(w, http.StatusOK, out)
}

// getTemplate returns one template. The include flags are checked but a
// template asked for by id is always returned: they widen a search, and
// every Berth template is the operator's own.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := templateID(w, r)
	if !ok {
		return
	}
	if _, err := queryBools(r, templateFlags...); err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	var t store.Template
	if err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Templates, id, "template", &t) }); err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// getOr404 reads a record, turning a missing one into a 404 naming it.
func getOr404(tx *store.Tx, bucket, id, what string, v any) error {
	if tx.GetRaw(bucket, id) == nil {
		return notFound("%s %s not found", what, id)
	}
	return tx.Get(bucket, id, v)
}

// templateRolls reports whether a template change needs new worker
// containers: anything but the name, readme and visibility.
func templateRolls(a, b store.Template) bool {
	return a.ImageName != b.ImageName || !maps.Equal(a.Env, b.Env) ||
		!slices.Equal(a.DockerEntrypoint, b.DockerEntrypoint) || !slices.Equal(a.DockerStartCmd, b.DockerStartCmd) ||
		!slices.Equal(a.Ports, b.Ports) || a.ContainerDiskInGb != b.ContainerDiskInGb || a.VolumeInGb != b.VolumeInGb ||
		a.VolumeMountPath != b.VolumeMountPath || a.ContainerRegistryAuthID != b.ContainerRegistryAuthID
}

// checkTemplate checks a template's references and the uniqueness of its
// name within tx.
func checkTemplate(tx *store.Tx, t store.Template) error {
	if t.ContainerRegistryAuthID != "" && tx.GetRaw(store.RegistryAuths, t.ContainerRegistryAuthID) == nil {
		return bad("containerRegistryAuthId %q does not exist", t.ContainerRegistryAuthID)
	}
	ts, err := all[store.Template](tx, store.Templates)
	if err != nil {
		return err
	}
	for _, o := range ts {
		if o.Name == t.Name && o.ID != t.ID {
			return conflict("a template named %q already exists (%s)", t.Name, o.ID)
		}
	}
	return nil
}

// updateTemplate is PATCH and POST …/update (TemplateUpdateInput). A
// change to what the container runs bumps the version of every endpoint
// using the template, which rolls its workers.
func (s *Server) updateTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := templateID(w, r)
	if !ok {
		return
	}
	var in TemplateInput
	if !decodeBody(w, r, &in) {
		return
	}
	if in.Category != nil {
		writeErr(w, r, http.StatusBadRequest, "category cannot be changed after a template is created")
		return
	}
	if in.IsServerless != nil {
		writeErr(w, r, http.StatusBadRequest, "isServerless cannot be changed after a template is created")
		return
	}
	var t store.Template
	var rolled []string
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Templates, id, "template", &t); err != nil {
			return err
		}
		before := t
		if err := applyTemplate(&t, in, false); err != nil {
			return err
		}
		if err := checkTemplate(tx, t); err != nil {
			return err
		}
		ops := []store.Op{store.Put(store.Templates, id, t)}
		if templateRolls(before, t) {
			eps, err := all[store.Endpoint](tx, store.Endpoints)
			if err != nil {
				return err
			}
			for _, e := range eps {
				if e.TemplateID == id {
					e.Version++
					ops = append(ops, store.Put(store.Endpoints, e.ID, e))
					rolled = append(rolled, e.ID)
				}
			}
		}
		return tx.Apply(ops...)
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	for _, ep := range rolled {
		s.forgetEndpoint(ep)
		if s.cfg.EndpointChanged != nil {
			s.cfg.EndpointChanged(ep)
		}
	}
	writeJSON(w, http.StatusOK, t)
}

// deleteTemplate refuses while an endpoint or pod uses the template.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id, ok := templateID(w, r)
	if !ok {
		return
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.Templates, id) == nil {
			return notFound("template %s not found", id)
		}
		users, err := templateUsers(tx, id)
		if err != nil {
			return err
		}
		if users != "" {
			return conflict("template %s is in use by %s; delete them or move them to another template first", id, users)
		}
		return tx.Apply(store.Delete(store.Templates, id))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	noContent(w)
}

// templateUsers names the endpoints and pods using template id, or "".
func templateUsers(tx *store.Tx, id string) (string, error) {
	return users(tx,
		func(e store.Endpoint) bool { return e.TemplateID == id },
		func(p store.Pod) bool { return p.TemplateID == id })
}

// users names the endpoints and pods that match, or "": what holds a
// resource that is about to be deleted.
func users(tx *store.Tx, endpoint func(store.Endpoint) bool, pod func(store.Pod) bool) (string, error) {
	eps, err := all[store.Endpoint](tx, store.Endpoints)
	if err != nil {
		return "", err
	}
	pods, err := all[store.Pod](tx, store.Pods)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range eps {
		if endpoint(e) {
			names = append(names, "endpoint "+e.ID)
		}
	}
	for _, p := range pods {
		if pod(p) {
			names = append(names, "pod "+p.ID)
		}
	}
	return strings.Join(names, ", "), nil
}

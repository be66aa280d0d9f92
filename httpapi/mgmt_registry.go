package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/queue"
	"berth/store"
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

// registryAuthView is what the API shows of a registry auth: never the
// password.
type registryAuthView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"createdAt"`
}

func viewRegistryAuth(a store.RegistryAuth) registryAuthView {
	return registryAuthView{ID: a.ID, Name: a.Name, Username: a.Username, CreatedAt: a.CreatedAt}
}

func (s *Server) createRegistryAuth(w http.ResponseWriter, r *http.Request) {
	var in RegistryAuthInput
	if !decodeBody(w, r, &in) {
		return
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"name", in.Name}, {"username", in.Username}, {"password", in.Password}} {
		if f.v == nil || strings.TrimSpace(*f.v) == "" {
			s.mgmtErr(w, r, bad("%s is required", f.name))
			return
		}
	}
	// RunPod's ids here are cuids ("clzdaifot0001l90809257ynb"): 25
	// lowercase alphanumerics starting with c.
	a := store.RegistryAuth{ID: "c" + queue.NewID(24), Name: *in.Name, Username: *in.Username, Password: *in.Password, CreatedAt: s.now()}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		as, err := all[store.RegistryAuth](tx, store.RegistryAuths)
		if err != nil {
			return err
		}
		for _, o := range as {
			if o.Name == a.Name {
				return conflict("a container registry auth named %q already exists (%s)", a.Name, o.ID)
			}
		}
		return tx.Apply(store.Put(store.RegistryAuths, a.ID, a))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewRegistryAuth(a))
}

func (s *Server) listRegistryAuths(w http.ResponseWriter, r *http.Request) {
	var as []store.RegistryAuth
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		as, err = all[store.RegistryAuth](tx, store.RegistryAuths)
		return err
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	byCreated(as, func(a store.RegistryAuth) time.Time { return a.CreatedAt }, func(a store.RegistryAuth) string { return a.ID })
	out := make([]registryAuthView, 0, len(as))
	for _, a := range as {
		out = append(out, viewRegistryAuth(a))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getRegistryAuth(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["containerRegistryAuthId"]
	var a store.RegistryAuth
	if err := s.cfg.Store.View(func(tx *store.Tx) error {
		return getOr404(tx, store.RegistryAuths, id, "container registry auth", &a)
	}); err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewRegistryAuth(a))
}

// deleteRegistryAuth refuses while a template or pod pulls with it.
func (s *Server) deleteRegistryAuth(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["containerRegistryAuthId"]
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.RegistryAuths, id) == nil {
			return notFound("container registry auth %s not found", id)
		}
		ts, err := all[store.Template](tx, store.Templates)
		if err != nil {
			return err
		}
		pods, err := all[store.Pod](tx, store.Pods)
		if err != nil {
			return err
		}
		var users []string
		for _, t := range ts {
			if t.ContainerRegistryAuthID == id {
				users = append(users, "template "+t.ID)
			}
		}
		for _, p := range pods {
			if p.ContainerRegistryAuthID == id {
				users = append(users, "pod "+p.ID)
			}
		}
		if len(users) > 0 {
			return conflict("container registry auth %s is used by %s; change them first", id, strings.Join(users, ", "))
		}
		return tx.Apply(store.Delete(store.RegistryAuths, id))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	noContent(w)
}

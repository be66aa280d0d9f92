package mgmt

import (
	"context"
	"strings"
	"time"

	"berth/queue"
	"berth/store"
)

// RegistryAuthInput creates a container registry auth; all three are
// required.
type RegistryAuthInput struct {
	Name     *string
	Username *string
	Password *string
}

// RegistryAuth is what the API shows of a registry auth: never the
// password.
type RegistryAuth struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"createdAt"`
}

func viewRegistryAuth(a store.RegistryAuth) RegistryAuth {
	return RegistryAuth{ID: a.ID, Name: a.Name, Username: a.Username, CreatedAt: a.CreatedAt}
}

// CreateRegistryAuth stores a credential; names are unique.
func (s *Service) CreateRegistryAuth(ctx context.Context, in RegistryAuthInput) (RegistryAuth, error) {
	if err := live(ctx); err != nil {
		return RegistryAuth{}, err
	}
	if err := CheckRegistryAuth(in, true); err != nil {
		return RegistryAuth{}, err
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
		return RegistryAuth{}, err
	}
	return viewRegistryAuth(a), nil
}

// CheckRegistryAuth checks a registry credential's input without storing
// anything: a create needs a name; an update may not rename; both need a
// username and a password.
func CheckRegistryAuth(in RegistryAuthInput, create bool) error {
	switch {
	case create && in.Name == nil:
		return invalid("name", "name is required")
	case create:
		if err := checkName(*in.Name); err != nil {
			return err
		}
	case in.Name != nil:
		return invalid("name", "name cannot be changed; create a new container registry auth")
	}
	return checkCredential(in)
}

// checkCredential checks a username and password: both required, within
// their limits.
func checkCredential(in RegistryAuthInput) error {
	for _, f := range []struct {
		name string
		v    *string
		l    Limit
	}{{"username", in.Username, LimitRegistryUser}, {"password", in.Password, LimitRegistryPassword}} {
		if f.v == nil || strings.TrimSpace(*f.v) == "" {
			return invalid(f.name, "%s is required", f.name)
		}
		if err := f.l.CheckLen(f.name, *f.v); err != nil {
			return err
		}
	}
	return CheckText("username", *in.Username, false)
}

// ListRegistryAuths lists them oldest first.
func (s *Service) ListRegistryAuths(ctx context.Context) ([]RegistryAuth, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var as []store.RegistryAuth
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		as, err = all[store.RegistryAuth](tx, store.RegistryAuths)
		return err
	})
	if err != nil {
		return nil, err
	}
	byCreated(as, func(a store.RegistryAuth) time.Time { return a.CreatedAt }, func(a store.RegistryAuth) string { return a.ID })
	out := make([]RegistryAuth, 0, len(as))
	for _, a := range as {
		out = append(out, viewRegistryAuth(a))
	}
	return out, nil
}

// GetRegistryAuth returns one.
func (s *Service) GetRegistryAuth(ctx context.Context, id string) (RegistryAuth, error) {
	if err := live(ctx); err != nil {
		return RegistryAuth{}, err
	}
	var a store.RegistryAuth
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		return getOr404(tx, store.RegistryAuths, id, "container registry auth", &a)
	})
	return viewRegistryAuth(a), err
}

// DeleteRegistryAuth deletes a credential. As RunPod's v2.json says: it is
// refused (Conflict, InUse) while a pod pulls with it; templates that
// name it lose the reference instead of blocking the delete (their
// endpoints roll: their workers pull without it).
func (s *Service) DeleteRegistryAuth(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	var rolled []string
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.RegistryAuths, id) == nil {
			return notFoundID("container registry auth", id)
		}
		pods, err := all[store.Pod](tx, store.Pods)
		if err != nil {
			return err
		}
		var users []string
		for _, p := range pods {
			if p.ContainerRegistryAuthID == id {
				users = append(users, "pod "+p.ID)
			}
		}
		if len(users) > 0 {
			return inUse("container registry auth %s is used by %s to pull its image; delete the pod or change its registry first", id, strings.Join(users, ", "))
		}
		ts, err := all[store.Template](tx, store.Templates)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.ContainerRegistryAuthID != id {
				continue
			}
			after := t
			after.ContainerRegistryAuthID = ""
			r, err := s.rollUsers(tx, t.ID, "", store.Release{CreatedAt: s.now(), Diff: templateDiff(t, after)})
			if err != nil {
				return err
			}
			rolled = append(rolled, r...)
			if err := tx.Apply(store.Put(store.Templates, t.ID, after)); err != nil {
				return err
			}
		}
		return tx.Apply(store.Delete(store.RegistryAuths, id))
	})
	if err != nil {
		return err
	}
	if s.cfg.RegistryAuthDeleted != nil {
		// The record is gone: a client that leaves does not keep the secret.
		rctx, cancel := context.WithTimeout(noCancel(ctx), time.Minute)
		defer cancel()
		if err := s.cfg.RegistryAuthDeleted(rctx, id); err != nil {
			s.cfg.Logger.Error("remove what the runtime keeps of a deleted registry login", "registryAuth", id, "err", err)
		}
	}
	for _, ep := range rolled {
		s.changed(ep)
	}
	return nil
}

// UpdateRegistryAuth replaces the credential's username and password (both
// required, as RunPod's updateRegistryAuth takes them); the name stays.
func (s *Service) UpdateRegistryAuth(ctx context.Context, id string, in RegistryAuthInput) (RegistryAuth, error) {
	if err := live(ctx); err != nil {
		return RegistryAuth{}, err
	}
	if err := CheckRegistryAuth(in, false); err != nil {
		return RegistryAuth{}, err
	}
	var a store.RegistryAuth
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.RegistryAuths, id, "container registry auth", &a); err != nil {
			return err
		}
		a.Username, a.Password = *in.Username, *in.Password
		return tx.Apply(store.Put(store.RegistryAuths, id, a))
	})
	if err != nil {
		return RegistryAuth{}, err
	}
	return viewRegistryAuth(a), nil
}

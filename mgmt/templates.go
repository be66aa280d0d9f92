package mgmt

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"berth/queue"
	"berth/store"
)

// TemplateInput creates or updates a template. nil fields are not given
// (defaults on create, unchanged on update).
type TemplateInput struct {
	Name                    *string
	ImageName               *string
	Category                *string // NVIDIA, AMD or CPU
	ContainerDiskInGb       *int
	VolumeInGb              *int
	VolumeMountPath         *string
	DockerEntrypoint        []string // nil: not given
	DockerStartCmd          []string // nil: not given
	Env                     map[string]string
	Ports                   []string // nil: not given; see SplitPorts
	Readme                  *string
	IsPublic                *bool
	IsServerless            *bool
	ContainerRegistryAuthID *string
	// PortLabels names ports (port number → label); every port must be
	// one of the template's. nil: not given. Labels of ports removed by
	// an update are dropped.
	PortLabels          map[string]string
	StartSSH            *bool    // REST v2
	StartJupyter        *bool    // REST v2
	AllowedCudaVersions []string // REST v2; nil: not given, [] clears
	// ShmSizeInMb is Berth's: the workers' /dev/shm in MiB, 0 for the
	// rule (runtime.ShmMiB).
	ShmSizeInMb *int
}

// templateIDRe is the shape of a template id: 10 lowercase alphanumerics,
// as queue.NewID(10) makes them and RunPod shows them ("30zmvf89kd").
var templateIDRe = regexp.MustCompile(`^[a-z0-9]{10}$`)

// CheckTemplateID refuses what cannot be a template id (Invalid, field
// "templateId").
func CheckTemplateID(id string) error {
	if !templateIDRe.MatchString(id) {
		return invalid("templateId", "invalid template id %s: a template id is 10 lowercase letters or digits", quote(ShortID(id)))
	}
	return nil
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// NewTemplateDefaults is a template before its input is applied.
func NewTemplateDefaults() store.Template {
	return store.Template{
		Category: "NVIDIA", ContainerDiskInGb: 50, VolumeInGb: 20, VolumeMountPath: "/workspace",
		DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{},
		Ports: []string{"8888/http", "22/tcp"},
	}
}

// ApplyTemplate validates in and applies it to t (no store access).
func ApplyTemplate(t *store.Template, in TemplateInput, create bool) error {
	if create {
		if in.Name == nil {
			return invalid("name", "name is required")
		}
		if in.ImageName == nil {
			return invalid("imageName", "imageName is required")
		}
	}
	// category and isServerless may change (v2.json lists both as
	// mutable); the same value again is no change.
	if err := oneOf("category", in.Category, []string{"NVIDIA", "AMD", "CPU"}, &t.Category); err != nil {
		return err
	}
	if in.IsServerless != nil {
		t.IsServerless = *in.IsServerless
	}
	if err := applyContainer(containerInput{in.Name, in.ImageName, in.DockerEntrypoint, in.DockerStartCmd, in.Env, in.Ports,
		in.ContainerDiskInGb, in.VolumeInGb, in.VolumeMountPath, in.ContainerRegistryAuthID}, templateContainer(t)); err != nil {
		return err
	}
	if in.ShmSizeInMb != nil && *in.ShmSizeInMb != 0 {
		if err := LimitShmSize.Check(int64(*in.ShmSizeInMb)); err != nil {
			return invalid("shmSizeInMb", "shmSizeInMb must be 0 (half the worker's memory) or %s, got %d", LimitShmSize.Range(), *in.ShmSizeInMb)
		}
	}
	if in.ShmSizeInMb != nil {
		t.ShmSizeInMb = *in.ShmSizeInMb
	}
	if in.PortLabels != nil {
		if err := validatePortLabels(in.PortLabels, t.Ports); err != nil {
			return err
		}
		t.PortLabels = maps.Clone(in.PortLabels)
	}
	for port := range t.PortLabels {
		if !slices.ContainsFunc(t.Ports, func(p string) bool { return strings.HasPrefix(p, port+"/") }) {
			delete(t.PortLabels, port)
		}
	}
	if len(t.PortLabels) == 0 {
		t.PortLabels = nil
	}
	if in.Readme != nil {
		if err := LimitReadme.CheckLen("readme", *in.Readme); err != nil {
			return err
		}
		if err := CheckText("readme", *in.Readme, true); err != nil {
			return err
		}
		t.Readme = *in.Readme
	}
	if in.IsPublic != nil {
		t.IsPublic = *in.IsPublic
	}
	if in.StartSSH != nil {
		t.StartSSH = *in.StartSSH
	}
	if in.StartJupyter != nil {
		t.StartJupyter = *in.StartJupyter
	}
	if in.AllowedCudaVersions != nil {
		if err := checkCudaVersions(in.AllowedCudaVersions); err != nil {
			return err
		}
		t.AllowedCudaVersions = append([]string{}, in.AllowedCudaVersions...)
	}
	return nil
}

// CreateTemplate validates in and stores a new template.
func (s *Service) CreateTemplate(ctx context.Context, in TemplateInput) (store.Template, error) {
	if err := live(ctx); err != nil {
		return store.Template{}, err
	}
	t := NewTemplateDefaults()
	if err := ApplyTemplate(&t, in, true); err != nil {
		return store.Template{}, err
	}
	t.ID = queue.NewID(10)
	t.CreatedAt = s.now()
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := checkTemplate(tx, t); err != nil {
			return err
		}
		return tx.Apply(store.Put(store.Templates, t.ID, t))
	})
	if err != nil {
		return store.Template{}, err
	}
	return t, nil
}

// TemplateFilter narrows ListTemplates.
type TemplateFilter struct {
	// IncludeEndpointBound lists templates an endpoint uses too; RunPod
	// leaves them out by default.
	IncludeEndpointBound bool
}

// ListTemplates lists the operator's templates, oldest first. Berth has no
// public templates of other users and no official ones.
func (s *Service) ListTemplates(ctx context.Context, f TemplateFilter) ([]store.Template, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var ts []store.Template
	bound := map[string]bool{}
	err := s.cfg.Store.View(func(tx *store.Tx) error {
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
		return nil, err
	}
	out := make([]store.Template, 0, len(ts))
	for _, t := range ts {
		if bound[t.ID] && !f.IncludeEndpointBound {
			continue
		}
		out = append(out, t)
	}
	byCreated(out, func(t store.Template) time.Time { return t.CreatedAt }, func(t store.Template) string { return t.ID })
	return out, nil
}

// GetTemplate returns one template.
func (s *Service) GetTemplate(ctx context.Context, id string) (store.Template, error) {
	if err := live(ctx); err != nil {
		return store.Template{}, err
	}
	if err := CheckTemplateID(id); err != nil {
		return store.Template{}, err
	}
	var t store.Template
	err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Templates, id, "template", &t) })
	return t, err
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
		return missing("containerRegistryAuthId", t.ContainerRegistryAuthID)
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

// UpdateTemplate applies in to template id. A change to what the container
// runs bumps the version of every endpoint using the template, which rolls
// its workers.
func (s *Service) UpdateTemplate(ctx context.Context, id string, in TemplateInput) (store.Template, error) {
	if err := live(ctx); err != nil {
		return store.Template{}, err
	}
	if err := CheckTemplateID(id); err != nil {
		return store.Template{}, err
	}
	var t store.Template
	var rolled []string
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Templates, id, "template", &t); err != nil {
			return err
		}
		before := t
		if err := ApplyTemplate(&t, in, false); err != nil {
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
			diff := templateDiff(before, t)
			for _, e := range eps {
				if e.TemplateID == id {
					e.Version++
					ops = append(ops, store.Put(store.Endpoints, e.ID, e), releaseOp(e, store.Release{CreatedAt: s.now(), Diff: diff}))
					rolled = append(rolled, e.ID)
				}
			}
		}
		return tx.Apply(ops...)
	})
	if err != nil {
		return store.Template{}, err
	}
	for _, ep := range rolled {
		s.changed(ep)
	}
	return t, nil
}

// DeleteTemplate refuses (Conflict) while an endpoint or pod uses it.
func (s *Service) DeleteTemplate(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	if err := CheckTemplateID(id); err != nil {
		return err
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.Templates, id) == nil {
			return notFoundID("template", id)
		}
		users, err := users(tx,
			func(e store.Endpoint) bool { return e.TemplateID == id },
			func(p store.Pod) bool { return p.TemplateID == id })
		if err != nil {
			return err
		}
		if users != "" {
			return inUse("template %s is in use by %s; delete them or move them to another template first", id, users)
		}
		return tx.Apply(store.Delete(store.Templates, id))
	})
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

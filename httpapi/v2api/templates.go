package v2api

import (
	"net/http"
	"strings"

	"berth/mgmt"
	"berth/store"
)

// Template is v2's Template.
type Template struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	Image               string            `json:"image"`
	Args                string            `json:"args"`
	Disk                int               `json:"disk"`
	Mounts              TemplateMounts    `json:"mounts"`
	Ports               []string          `json:"ports"`
	Env                 map[string]string `json:"env"`
	Registry            *string           `json:"registry"`
	Serverless          bool              `json:"serverless"`
	Public              bool              `json:"public"`
	Category            string            `json:"category"`
	StartSSH            bool              `json:"startSsh"`
	StartJupyter        bool              `json:"startJupyter"`
	AllowedCudaVersions []string          `json:"allowedCudaVersions"`
	Readme              string            `json:"readme,omitempty"` // Berth: v1's readme
}

// TemplateMounts is v2's TemplateMounts: a template has at most a
// persistent (pod volume) mount.
type TemplateMounts struct {
	Persistent *PersistentMount `json:"persistent,omitempty"`
}

// PersistentMount is host-local storage: the pod volume.
type PersistentMount struct {
	Size int    `json:"size"`
	Path string `json:"path"`
}

func viewTemplate(t store.Template) Template {
	v := Template{
		ID: t.ID, Name: t.Name, Image: t.ImageName, Args: joinArgs(t.DockerStartCmd), Disk: t.ContainerDiskInGb,
		Ports: nonNil(t.Ports), Env: t.Env, Serverless: t.IsServerless, Public: t.IsPublic, Category: t.Category,
		StartSSH: t.StartSSH, StartJupyter: t.StartJupyter, AllowedCudaVersions: nonNil(t.AllowedCudaVersions), Readme: t.Readme,
	}
	if v.Env == nil {
		v.Env = map[string]string{}
	}
	if v.Category == "" {
		v.Category = "NVIDIA"
	}
	if t.ContainerRegistryAuthID != "" {
		v.Registry = ptr(t.ContainerRegistryAuthID)
	}
	if t.VolumeInGb > 0 {
		v.Mounts.Persistent = &PersistentMount{Size: t.VolumeInGb, Path: t.VolumeMountPath}
	}
	return v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// joinArgs shows a command as v2's one-string args, quoting words with
// blanks so SplitArgs reads it back.
func joinArgs(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w == "" || strings.ContainsAny(w, " \t\n'\"") {
			q := `"`
			if strings.Contains(w, `"`) {
				q = `'`
			}
			w = q + w + q
		}
		out[i] = w
	}
	return strings.Join(out, " ")
}

// ContainerConfig is v2's ContainerConfig input, shared by templates, pods
// and endpoints.
type ContainerConfig struct {
	Image    *string           `json:"image"`
	Args     *string           `json:"args"`
	Disk     *int              `json:"disk"`
	Env      map[string]string `json:"env"`
	Ports    *[]string         `json:"ports"`
	Registry nullable[string]  `json:"registry"`
}

func (c ContainerConfig) given() bool {
	return c.Image != nil || c.Args != nil || c.Disk != nil || c.Env != nil || c.Ports != nil || c.Registry.Set
}

// templateInput is the container part as mgmt's template input.
func (c ContainerConfig) templateInput() (mgmt.TemplateInput, error) {
	in := mgmt.TemplateInput{ImageName: c.Image, ContainerDiskInGb: c.Disk, Env: c.Env}
	if c.Args != nil {
		words, err := mgmt.SplitArgs(*c.Args)
		if err != nil {
			return in, mgmt.InvalidInput("args", "args: %v", err)
		}
		in.DockerStartCmd = words
	}
	if c.Ports != nil {
		in.Ports = nonNil(*c.Ports)
	}
	if c.Registry.Set {
		in.ContainerRegistryAuthID = ptr("")
		if c.Registry.Value != nil {
			in.ContainerRegistryAuthID = c.Registry.Value
		}
	}
	return in, nil
}

type templateBody struct {
	ContainerConfig
	Name                *string         `json:"name"`
	AllowedCudaVersions *[]string       `json:"allowedCudaVersions"`
	Category            *string         `json:"category"`
	Mounts              *TemplateMounts `json:"mounts"`
	Public              *bool           `json:"public"`
	Serverless          *bool           `json:"serverless"`
	StartJupyter        *bool           `json:"startJupyter"`
	StartSSH            *bool           `json:"startSsh"`
	Readme              *string         `json:"readme"` // Berth: v1's readme
}

func (b templateBody) input(create bool) (mgmt.TemplateInput, error) {
	in, err := b.templateInput()
	if err != nil {
		return in, err
	}
	in.Name, in.Category, in.IsPublic, in.IsServerless, in.Readme = b.Name, b.Category, b.Public, b.Serverless, b.Readme
	in.StartSSH, in.StartJupyter = b.StartSSH, b.StartJupyter
	if b.AllowedCudaVersions != nil {
		in.AllowedCudaVersions = nonNil(*b.AllowedCudaVersions)
	}
	if create {
		// v2's defaults: category NVIDIA, SSH and Jupyter on, no pod
		// volume unless mounts.persistent asks for one.
		if in.StartSSH == nil {
			in.StartSSH = ptr(true)
		}
		if in.StartJupyter == nil {
			in.StartJupyter = ptr(true)
		}
		in.VolumeInGb = ptr(0)
		if in.Ports == nil {
			in.Ports = []string{}
		}
	}
	if b.Mounts != nil && b.Mounts.Persistent != nil {
		p := b.Mounts.Persistent
		in.VolumeInGb, in.VolumeMountPath = ptr(p.Size), ptr(p.Path)
	}
	return in, nil
}

// TemplateList is v2's ListTemplatesResponse.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

func (a *API) listTemplates(w http.ResponseWriter, r *http.Request) {
	// v2 lists every template of the account, endpoint-bound ones too.
	ts, err := a.cfg.Mgmt.ListTemplates(r.Context(), mgmt.TemplateFilter{IncludeEndpointBound: true})
	out := TemplateList{Templates: []Template{}}
	for _, t := range ts {
		out.Templates = append(out.Templates, viewTemplate(t))
	}
	a.answer(w, r, http.StatusOK, out, err)
}

func (a *API) createTemplate(w http.ResponseWriter, r *http.Request) {
	var b templateBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	in, err := b.input(true)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	t, err := a.cfg.Mgmt.CreateTemplate(r.Context(), in)
	a.answer(w, r, http.StatusCreated, viewTemplate(t), err)
}

func (a *API) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := a.cfg.Mgmt.GetTemplate(r.Context(), pathID(r))
	a.answer(w, r, http.StatusOK, viewTemplate(t), err)
}

func (a *API) updateTemplate(w http.ResponseWriter, r *http.Request) {
	var b templateBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	in, err := b.input(false)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	t, err := a.cfg.Mgmt.UpdateTemplate(r.Context(), pathID(r), in)
	a.answer(w, r, http.StatusOK, viewTemplate(t), err)
}

func (a *API) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteTemplate(r.Context(), pathID(r)))
}

// listPublicTemplates: Berth has no official, verified or community
// templates; the operator's public ones are its catalogue.
func (a *API) listPublicTemplates(w http.ResponseWriter, r *http.Request) {
	src := r.URL.Query().Get("source") // checked by its schema (params.go)
	ts, err := a.cfg.Mgmt.ListTemplates(r.Context(), mgmt.TemplateFilter{IncludeEndpointBound: true})
	out := TemplateList{Templates: []Template{}}
	if src == "community" {
		for _, t := range ts {
			if t.IsPublic {
				out.Templates = append(out.Templates, viewTemplate(t))
			}
		}
	}
	a.answer(w, r, http.StatusOK, out, err)
}

// Package apply makes a declarative file of templates, endpoints, network
// volumes and registry auths true on a Berth, idempotently: `berth apply
// -f FILE` (through POST /v1/apply) and `berth serve --apply FILE` at
// start-up. Plan is a pure function from the file and the records to the
// actions; Execute carries them out through package mgmt, which decides
// every rule (nothing is validated twice).
//
// The file is JSON (the same field names as the REST v1 bodies Berth and
// RunPod take, so `berth … create -f` files and v1 scripts carry over):
//
//	{
//	  "registryAuths":  [{"name": "ghcr", "username": "me", "password": "${GHCR_TOKEN}"}],
//	  "networkVolumes": [{"name": "models", "size": 20, "dataCenterId": "EU-RO-1"}],
//	  "templates":      [{"name": "echo", "imageName": "me/echo:${TAG}", "isServerless": true, "registryAuth": "ghcr"}],
//	  "endpoints":      [{"name": "echo", "template": "echo", "networkVolume": "models", "workersMax": 1}]
//	}
//
// Records are matched by name (unique within a kind). "${VAR}" in a string
// is the environment variable VAR (a missing one is an error). References
// name other records of the file or of the server: a template's
// "registryAuth", an endpoint's "template", "networkVolume" and
// "networkVolumes".
//
// An endpoint may carry a "build" instead of its template's image, as
// Compose's build: a context directory (relative to the file's folder) or
// a git source, built through Berth's builder (the path berth deploy
// takes) and released onto the endpoint's template; the image's tag is the
// digest of the context and options, so the same source plans no change
// and builds nothing (build.go).
package apply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"berth/v1input"
)

// File is the declarative file.
type File struct {
	RegistryAuths  []RegistryAuth `json:"registryAuths"`
	NetworkVolumes []Volume       `json:"networkVolumes"`
	Templates      []Template     `json:"templates"`
	Endpoints      []Endpoint     `json:"endpoints"`
}

// RegistryAuth is a registry credential. Its password cannot be read
// back, so an existing credential is updated only when its username
// differs (delete it to change only the password).
type RegistryAuth struct {
	v1input.RegistryAuthInput
}

// Volume is a network volume (REST v1 fields).
type Volume struct {
	v1input.VolumeInput
}

// Template is a template (REST v1 fields) with its registry auth by name.
type Template struct {
	v1input.TemplateInput
	RegistryAuth *string `json:"registryAuth,omitempty"`
}

// Endpoint is an endpoint (REST v1 fields) with its template and network
// volumes by name, and its image's build.
type Endpoint struct {
	v1input.EndpointInput
	Template       *string  `json:"template,omitempty"`
	NetworkVolume  *string  `json:"networkVolume,omitempty"`
	NetworkVolumes []string `json:"networkVolumes,omitempty"`
	Build          *Build   `json:"build,omitempty"`
}

var varRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Parse reads a file: JSON, unknown fields refused, "${VAR}" expanded from
// getenv (nil: os.Getenv; a variable that is not set is an error), names
// required and unique within each kind, references given by name only.
func Parse(r io.Reader, getenv func(string) (string, bool)) (File, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	raw, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return File{}, err
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return File{}, fmt.Errorf("the file is not JSON: %w", err)
	}
	var missing []string
	generic = expand(generic, func(name string) string {
		v, ok := getenv(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return File{}, fmt.Errorf("the file uses environment variables that are not set: %s", strings.Join(slices.Compact(missing), ", "))
	}
	raw, _ = json.Marshal(generic)
	return Decode(raw)
}

// Decode reads a file whose variables are already expanded (POST
// /v1/apply's body): unknown fields refused, names and references checked.
func Decode(raw []byte) (File, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("the file: %w", err)
	}
	if dec.More() {
		return File{}, fmt.Errorf("the file: one JSON object expected")
	}
	for i := range f.Endpoints {
		// A built endpoint without a template gets one of its own name,
		// as berth deploy makes.
		if e := &f.Endpoints[i]; e.Build != nil && e.Template == nil && e.Name != nil {
			e.Template = ptr(*e.Name)
		}
	}
	return f, f.check()
}

// expand replaces ${VAR} in every string of v.
func expand(v any, get func(string) string) any {
	switch v := v.(type) {
	case string:
		return varRe.ReplaceAllStringFunc(v, func(m string) string { return get(m[2 : len(m)-1]) })
	case []any:
		for i := range v {
			v[i] = expand(v[i], get)
		}
	case map[string]any:
		for k := range v {
			v[k] = expand(v[k], get)
		}
	}
	return v
}

// check: every record is named, once per kind; references are by name.
func (f File) check() error {
	kinds := []struct {
		kind  string
		names []*string
	}{
		{"registryAuths", collect(f.RegistryAuths, func(a RegistryAuth) *string { return a.Name })},
		{"networkVolumes", collect(f.NetworkVolumes, func(v Volume) *string { return v.Name })},
		{"templates", collect(f.Templates, func(t Template) *string { return t.Name })},
		{"endpoints", collect(f.Endpoints, func(e Endpoint) *string { return e.Name })},
	}
	for _, k := range kinds {
		seen := map[string]bool{}
		for i, n := range k.names {
			if n == nil || strings.TrimSpace(*n) == "" {
				return fmt.Errorf("%s[%d]: name is required (records are matched by name)", k.kind, i)
			}
			if seen[*n] {
				return fmt.Errorf("%s: %q is named twice", k.kind, *n)
			}
			seen[*n] = true
		}
	}
	for i, t := range f.Templates {
		if t.ContainerRegistryAuthID != nil {
			return fmt.Errorf("templates[%d] (%s): give the registry auth by name, \"registryAuth\", not containerRegistryAuthId", i, *t.Name)
		}
	}
	for i, e := range f.Endpoints {
		switch {
		case e.TemplateID != nil:
			return fmt.Errorf("endpoints[%d] (%s): give the template by name, \"template\", not templateId", i, *e.Name)
		case e.NetworkVolumeID != nil || e.NetworkVolumeIDs != nil:
			return fmt.Errorf("endpoints[%d] (%s): give network volumes by name, \"networkVolume\" or \"networkVolumes\"", i, *e.Name)
		case e.Template == nil:
			return fmt.Errorf("endpoints[%d] (%s): \"template\" (a template's name) is required", i, *e.Name)
		}
	}
	return f.checkBuilds()
}

func ptr[T any](v T) *T { return &v }

func collect[T any](list []T, name func(T) *string) []*string {
	out := make([]*string, len(list))
	for i, v := range list {
		out[i] = name(v)
	}
	return out
}

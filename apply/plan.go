package apply

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"berth/mgmt"
	"berth/store"
)

// Kinds of records, in the order they are created (and deleted backwards).
const (
	KindRegistryAuth = "registry auth"
	KindVolume       = "network volume"
	KindTemplate     = "template"
	KindEndpoint     = "endpoint"
)

// Ops of an Action.
const (
	OpCreate    = "create"
	OpUpdate    = "update"
	OpDelete    = "delete"
	OpUnchanged = "unchanged"
)

// Action is one step of a plan.
type Action struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	ID      string   `json:"id,omitempty"` // the record's; a created one's once Execute made it
	Op      string   `json:"op"`
	Changes []Change `json:"changes,omitempty"`
	// Detail is a build's: its source and the image it makes (or, done,
	// the image it released).
	Detail string `json:"detail,omitempty"`
	// fields are the REST v1 fields to send (references still by name,
	// under refKeys), for a create or an update.
	fields map[string]any
	build  *buildStep
}

// Change is one field an update changes.
type Change struct {
	Field string `json:"field"`
	From  any    `json:"from"`
	To    any    `json:"to"`
}

// State is what the server holds.
type State struct {
	RegistryAuths []mgmt.RegistryAuth
	Volumes       []store.NetworkVolume
	Templates     []store.Template
	Endpoints     []store.Endpoint
	// Builds are the builds of the endpoints the file builds, by endpoint
	// id, newest first; GitCredentials the stored git credentials (when a
	// build names one).
	Builds         map[string][]store.Build
	GitCredentials []mgmt.GitCredential
}

// StateOf reads a State from a mgmt snapshot.
func StateOf(sn mgmt.Snapshot) State {
	st := State{RegistryAuths: sn.RegistryAuths, Endpoints: sn.Endpoints}
	for _, v := range sn.Volumes {
		st.Volumes = append(st.Volumes, v)
	}
	for _, t := range sn.Templates {
		st.Templates = append(st.Templates, t)
	}
	return st
}

// String is the action as a plan line: "+ template echo", "~ endpoint echo
// (abc): workersMax 1 → 2", "- endpoint old (def)", "= volume models (ghi)".
func (a Action) String() string {
	sign := map[string]string{OpCreate: "+", OpUpdate: "~", OpDelete: "-", OpUnchanged: "=", OpBuild: "+"}[a.Op]
	s := sign + " " + a.Kind + " " + a.Name
	if a.ID != "" {
		s += " (" + a.ID + ")"
	}
	var ch []string
	for _, c := range a.Changes {
		ch = append(ch, fmt.Sprintf("%s %s → %s", c.Field, show(c.From), show(c.To)))
	}
	if a.Detail != "" {
		ch = append(ch, a.Detail)
	}
	if len(ch) > 0 {
		s += ": " + strings.Join(ch, ", ")
	}
	return s
}

func show(v any) string {
	if v == nil {
		return "(none)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// newRef marks, in a plan, a reference to a record the plan creates.
func newRef(kind, name string) string { return "(new " + kind + " " + name + ")" }

// Plan computes the actions that make f true on a server holding st: a
// record named in f and missing is created, one whose given fields differ
// is updated (only those fields), one that matches is unchanged; with
// prune, a record of these kinds that f does not name is deleted. It
// decides nothing about validity: mgmt refuses what is invalid when the
// plan is executed. An error is a file the server's records make
// ambiguous (two records of one name) or a reference to nothing.
func Plan(f File, st State, prune bool) ([]Action, error) {
	var out []Action
	ids := map[string]map[string]string{} // kind → name → id or newRef
	for _, k := range []string{KindRegistryAuth, KindVolume, KindTemplate, KindEndpoint} {
		ids[k] = map[string]string{}
	}

	// The server's records by name; a name held twice cannot be matched.
	type rec struct {
		id  string
		doc map[string]any
	}
	byName := map[string]map[string][]rec{}
	add := func(kind, name, id string, v any) {
		if byName[kind] == nil {
			byName[kind] = map[string][]rec{}
		}
		byName[kind][name] = append(byName[kind][name], rec{id, toMap(v)})
	}
	for _, a := range st.RegistryAuths {
		add(KindRegistryAuth, a.Name, a.ID, a)
	}
	for _, v := range st.Volumes {
		add(KindVolume, v.Name, v.ID, v)
	}
	for _, t := range st.Templates {
		add(KindTemplate, t.Name, t.ID, t)
	}
	for _, e := range st.Endpoints {
		add(KindEndpoint, e.Name, e.ID, e)
	}
	match := func(kind, name string) (rec, bool, error) {
		list := byName[kind][name]
		switch len(list) {
		case 0:
			return rec{}, false, nil
		case 1:
			return list[0], true, nil
		}
		var idl []string
		for _, r := range list {
			idl = append(idl, r.id)
		}
		return rec{}, false, fmt.Errorf("%s %q: %d records on the server have this name (%s); rename or delete all but one", kind, name, len(list), strings.Join(idl, ", "))
	}
	ref := func(kind, name, from string) (string, error) {
		if id, ok := ids[kind][name]; ok {
			return id, nil
		}
		r, ok, err := match(kind, name)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("%s: %s %q is neither in the file nor on the server", from, kind, name)
		}
		return r.id, nil
	}

	plan := func(kind, name string, desired map[string]any, compare func(cur map[string]any) []Change) error {
		r, ok, err := match(kind, name)
		if err != nil {
			return err
		}
		if !ok {
			ids[kind][name] = newRef(kind, name)
			out = append(out, Action{Kind: kind, Name: name, Op: OpCreate, fields: desired})
			return nil
		}
		ids[kind][name] = r.id
		changes := compare(r.doc)
		if len(changes) == 0 {
			out = append(out, Action{Kind: kind, Name: name, ID: r.id, Op: OpUnchanged})
			return nil
		}
		upd := map[string]any{}
		for _, c := range changes {
			upd[c.Field] = desired[c.Field]
		}
		out = append(out, Action{Kind: kind, Name: name, ID: r.id, Op: OpUpdate, Changes: changes, fields: upd})
		return nil
	}
	diff := func(desired, cur map[string]any, skip ...string) []Change {
		var ch []Change
		for _, k := range sortedKeys(desired) {
			if slices.Contains(skip, k) {
				continue
			}
			if !sameJSON(desired[k], cur[k]) {
				ch = append(ch, Change{Field: k, From: cur[k], To: desired[k]})
			}
		}
		return ch
	}

	for _, a := range f.RegistryAuths {
		d := toMap(a.RegistryAuthInput)
		if err := plan(KindRegistryAuth, *a.Name, d, func(cur map[string]any) []Change {
			// The password cannot be read back: the username decides.
			if ch := diff(d, cur, "password"); len(ch) > 0 {
				if _, ok := d["password"]; ok {
					ch = append(ch, Change{Field: "password", From: "(hidden)", To: "(hidden)"})
				}
				return ch
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	for _, v := range f.NetworkVolumes {
		d := toMap(v.VolumeInput)
		if err := plan(KindVolume, *v.Name, d, func(cur map[string]any) []Change { return diff(d, cur) }); err != nil {
			return nil, err
		}
	}
	// A built endpoint's template: the file's, the server's, or one of
	// the endpoint's name the plan creates; created, its image is the
	// placeholder until the build releases one.
	templates := slices.Clone(f.Templates)
	builtTpl := map[string]bool{}
	for _, e := range f.Endpoints {
		if e.Build == nil {
			continue
		}
		builtTpl[*e.Template] = true
		if !slices.ContainsFunc(templates, func(t Template) bool { return *t.Name == *e.Template }) {
			tp := Template{}
			tp.Name, tp.IsServerless = e.Template, ptr(true)
			templates = append(templates, tp)
		}
	}
	for _, t := range templates {
		d := toMap(t.TemplateInput)
		if t.RegistryAuth != nil {
			id, err := ref(KindRegistryAuth, *t.RegistryAuth, "template "+*t.Name)
			if err != nil {
				return nil, err
			}
			d["containerRegistryAuthId"] = id
		}
		if err := plan(KindTemplate, *t.Name, d, func(cur map[string]any) []Change { return diff(d, cur) }); err != nil {
			return nil, err
		}
		if last := &out[len(out)-1]; builtTpl[*t.Name] && last.Op == OpCreate {
			last.fields["imageName"] = placeholderImage
		}
	}
	var early, late []Action // builds before every other action, and after the endpoints
	for _, e := range f.Endpoints {
		d := toMap(e.EndpointInput)
		id, err := ref(KindTemplate, *e.Template, "endpoint "+*e.Name)
		if err != nil {
			return nil, err
		}
		d["templateId"] = id
		if e.NetworkVolume != nil {
			if d["networkVolumeId"], err = ref(KindVolume, *e.NetworkVolume, "endpoint "+*e.Name); err != nil {
				return nil, err
			}
		}
		if e.NetworkVolumes != nil {
			list := []any{}
			for _, n := range e.NetworkVolumes {
				id, err := ref(KindVolume, n, "endpoint "+*e.Name)
				if err != nil {
					return nil, err
				}
				list = append(list, id)
			}
			d["networkVolumeIds"] = list
		}
		if err := plan(KindEndpoint, *e.Name, d, func(cur map[string]any) []Change { return diff(d, cur) }); err != nil {
			return nil, err
		}
		if e.Build != nil {
			act, first, err := planBuild(e, &out[len(out)-1], id, st)
			if err != nil {
				return nil, err
			}
			if first {
				early = append(early, act)
			} else {
				late = append(late, act)
			}
		}
	}
	out = append(append(early, out...), late...)

	if prune {
		// Deleted in the reverse order of creation: endpoints first.
		for _, k := range []string{KindEndpoint, KindTemplate, KindVolume, KindRegistryAuth} {
			for _, name := range sortedKeys(byName[k]) {
				if _, named := ids[k][name]; named {
					continue
				}
				for _, r := range byName[k][name] {
					out = append(out, Action{Kind: k, Name: name, ID: r.id, Op: OpDelete})
				}
			}
		}
	}
	return out, nil
}

// toMap is v's JSON object without its null fields.
func toMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for k, x := range m {
		if x == nil {
			delete(m, k)
		}
	}
	return m
}

// sameJSON compares two decoded JSON values; a missing value equals the
// type's zero (a record omits empty fields).
func sameJSON(a, b any) bool {
	if b == nil {
		switch a := a.(type) {
		case string:
			return a == ""
		case bool:
			return !a
		case float64:
			return a == 0
		case []any:
			return len(a) == 0
		case map[string]any:
			return len(a) == 0
		}
	}
	if am, ok := a.(map[string]any); ok && len(am) == 0 {
		if bm, ok := b.(map[string]any); ok && len(bm) == 0 {
			return true
		}
	}
	if al, ok := a.([]any); ok && len(al) == 0 {
		if bl, ok := b.([]any); ok && len(bl) == 0 {
			return true
		}
	}
	return reflect.DeepEqual(a, b)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

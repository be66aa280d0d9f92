package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"berth/mgmt"
	"berth/store"
	"berth/v1input"
)

// Result is what Apply did: every action (created records with their new
// ids) and the id of every record the file names, by kind and name.
type Result struct {
	Actions []Action                     `json:"actions"`
	IDs     map[string]map[string]string `json:"ids"` // "templates" → name → id
	DryRun  bool                         `json:"dryRun,omitempty"`
}

// idKeys are Result.IDs' keys by kind (the file's own names).
var idKeys = map[string]string{KindRegistryAuth: "registryAuths", KindVolume: "networkVolumes", KindTemplate: "templates", KindEndpoint: "endpoints", KindBuild: "builds"}

// Options are Apply's.
type Options struct {
	// Prune deletes the records of these kinds the file does not name;
	// DryRun plans only.
	Prune, DryRun bool
	// Builder runs the file's builds (nil: a plan that builds fails).
	Builder Builder
	// Contexts are the packed build contexts of the file's endpoints with
	// a build "context", by endpoint name (the caller packs the
	// directories: PackDir, or receives them: SpoolContext).
	Contexts map[string]Context
	// Log receives a build's steps and Berth's own lines, by endpoint
	// name (nil: none).
	Log func(endpoint, line string)
}

// Apply plans f against m's records and, unless o.DryRun, executes the
// plan, waiting for its builds. On an error the actions before it have
// been done (applying again converges) and the Result says which.
func Apply(ctx context.Context, m *mgmt.Service, f File, o Options) (Result, error) {
	sn, err := m.Snapshot(ctx)
	if err != nil {
		return Result{}, err
	}
	st := StateOf(sn)
	if err := buildState(ctx, m, f, o, &st); err != nil {
		return Result{}, err
	}
	actions, err := Plan(f, st, o.Prune)
	if err != nil {
		return Result{}, PlanError{err}
	}
	if err := Check(actions, st); err != nil {
		return Result{}, err
	}
	if o.DryRun {
		return result(actions, true), nil
	}
	done, err := Execute(ctx, m, actions, o)
	return result(done, false), err
}

// buildState gives the file's builds their context digests and st the
// builds of the endpoints they build and, when a build names one, the git
// credentials.
func buildState(ctx context.Context, m *mgmt.Service, f File, o Options, st *State) error {
	creds := false
	for i, e := range f.Endpoints {
		b := e.Build
		if b == nil {
			continue
		}
		if b.Context != nil {
			c, ok := o.Contexts[*e.Name]
			if !ok {
				return PlanError{fmt.Errorf("endpoints[%d] (%s): build: the context %s was not sent with the file (berth apply packs and sends it)", i, shown(*e.Name), shown(*b.Context))}
			}
			b.digest = c.Digest
		}
		if b.Git != nil && b.Git.Credential != "" {
			creds = true
		}
		for _, x := range st.Endpoints {
			if x.Name != *e.Name {
				continue
			}
			bs, err := m.Builds(ctx, x.ID)
			if err != nil {
				return err
			}
			if st.Builds == nil {
				st.Builds = map[string][]store.Build{}
			}
			st.Builds[x.ID] = bs
		}
	}
	if creds {
		list, err := m.ListGitCredentials(ctx)
		if err != nil {
			return err
		}
		st.GitCredentials = list
	}
	return nil
}

// Check runs mgmt's rules of a record's fields (mgmt.ApplyEndpoint,
// ApplyTemplate, CheckVolume, CheckRegistryAuth: no store access) on every
// create and update of actions, an update on a copy of the record it
// changes, so a dry run refuses what the real apply would and a real apply
// refuses before it changes anything. References are the plan's (Plan
// resolved them); what depends on the other records at the moment of the
// change (a name taken meanwhile) is refused by the execution.
func Check(actions []Action, st State) error {
	for _, a := range actions {
		if a.Op != OpCreate && a.Op != OpUpdate {
			continue
		}
		if err := check(a, st); err != nil {
			return fmt.Errorf("%s %s %s: %w", a.Op, a.Kind, shown(a.Name), err)
		}
	}
	return nil
}

// shown is a name as an error shows it: quoted when it holds a control
// character.
func shown(name string) string {
	if strings.ContainsFunc(name, mgmt.IsControl) {
		return strconv.Quote(name)
	}
	return name
}

func check(a Action, st State) error {
	create := a.Op == OpCreate
	fields := a.fields
	if fields == nil {
		fields = map[string]any{}
	}
	switch a.Kind {
	case KindRegistryAuth:
		in, err := checkInto[v1input.RegistryAuthInput](fields)
		if err != nil {
			return err
		}
		return mgmt.CheckRegistryAuth(in.Mgmt(), create)
	case KindVolume:
		in, err := checkInto[v1input.VolumeInput](fields)
		if err != nil {
			return err
		}
		var cur *store.NetworkVolume
		for i := range st.Volumes {
			if st.Volumes[i].ID == a.ID {
				cur = &st.Volumes[i]
			}
		}
		_, err = mgmt.CheckVolume(in.Mgmt(), create, cur)
		return err
	case KindTemplate:
		in, err := checkInto[v1input.TemplateInput](fields)
		if err != nil {
			return err
		}
		t := mgmt.NewTemplateDefaults()
		for _, c := range st.Templates {
			if c.ID == a.ID {
				t = c
			}
		}
		return mgmt.ApplyTemplate(&t, in.Mgmt(), create)
	case KindEndpoint:
		in, err := checkInto[v1input.EndpointInput](fields)
		if err != nil {
			return err
		}
		e := mgmt.NewEndpointDefaults()
		for _, c := range st.Endpoints {
			if c.ID == a.ID {
				e = c
			}
		}
		return mgmt.ApplyEndpoint(&e, in.Mgmt(), create)
	}
	return fmt.Errorf("unknown kind %q", a.Kind)
}

// checkInto is into with a field of the wrong type refused as mgmt
// refuses input.
func checkInto[T any](fields map[string]any) (T, error) {
	v, err := into[T](fields)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return v, mgmt.InvalidInput(te.Field, "%s: a %s is not a %s", te.Field, te.Value, te.Type)
		}
		return v, mgmt.InvalidInput("", "%v", err)
	}
	return v, nil
}

// released is a completed build's line: the image and its release.
func released(b store.Build) string {
	switch {
	case b.ReleaseVersion == 0:
		return b.RunImage() + " (already running: no release)"
	case b.Reused:
		return fmt.Sprintf("%s, release v%d (image reused)", b.RunImage(), b.ReleaseVersion)
	}
	return fmt.Sprintf("%s, release v%d", b.RunImage(), b.ReleaseVersion)
}

func result(actions []Action, dry bool) Result {
	r := Result{Actions: actions, IDs: map[string]map[string]string{}, DryRun: dry}
	for _, k := range idKeys {
		r.IDs[k] = map[string]string{}
	}
	for _, a := range actions {
		if a.Op != OpDelete && a.ID != "" {
			r.IDs[idKeys[a.Kind]][a.Name] = a.ID
		}
	}
	return r
}

// PlanError is a file the server's records make impossible to plan: a
// name two records have, a reference to nothing.
type PlanError struct{ Err error }

func (e PlanError) Error() string { return e.Err.Error() }
func (e PlanError) Unwrap() error { return e.Err }

// Execute carries out actions in order through m (builds through
// o.Builder, waiting for each); references to records the plan creates
// are replaced by their new ids. It stops at the first error, returning
// the actions done.
func Execute(ctx context.Context, m *mgmt.Service, actions []Action, o Options) ([]Action, error) {
	created := map[string]string{} // newRef → id
	var done []Action
	for _, a := range actions {
		fields := resolve(a.fields, created).(map[string]any)
		var id string
		var err error
		switch a.Op {
		case OpUnchanged:
			done = append(done, a)
			continue
		case OpCreate, OpUpdate:
			id, err = save(ctx, m, a, fields)
		case OpDelete:
			err = remove(ctx, m, a)
		case OpBuild:
			epID := resolve(a.build.endpoint, created).(string)
			var b store.Build
			if b, err = runBuild(ctx, m, o, a, epID); err == nil {
				a.ID, a.Detail = b.ID, released(b)
				done = append(done, a)
				continue
			}
		}
		if err != nil && a.Kind == KindBuild {
			return done, fmt.Errorf("build of endpoint %s: %w", a.Name, err)
		}
		if err != nil {
			return done, fmt.Errorf("%s %s %s: %w", a.Op, a.Kind, a.Name, err)
		}
		if a.Op == OpCreate {
			a.ID = id
			created[newRef(a.Kind, a.Name)] = id
		}
		done = append(done, a)
	}
	return done, nil
}

// resolve replaces newRef strings in v by the ids made.
func resolve(v any, created map[string]string) any {
	switch v := v.(type) {
	case nil:
		return map[string]any{}
	case string:
		if strings.HasPrefix(v, "(new ") {
			if id, ok := created[v]; ok {
				return id
			}
		}
		return v
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = resolve(v[i], created)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = resolve(x, created)
		}
		return out
	}
	return v
}

// into decodes REST v1 fields into a v1input body.
func into[T any](fields map[string]any) (T, error) {
	var v T
	b, err := json.Marshal(fields)
	if err != nil {
		return v, err
	}
	err = json.Unmarshal(b, &v)
	return v, err
}

func save(ctx context.Context, m *mgmt.Service, a Action, fields map[string]any) (string, error) {
	create := a.Op == OpCreate
	switch a.Kind {
	case KindRegistryAuth:
		in, err := into[v1input.RegistryAuthInput](fields)
		if err != nil {
			return "", err
		}
		if create {
			r, err := m.CreateRegistryAuth(ctx, in.Mgmt())
			return r.ID, err
		}
		if in.Password == nil {
			return "", fmt.Errorf("its username changes: give its password too")
		}
		_, err = m.UpdateRegistryAuth(ctx, a.ID, in.Mgmt())
		return a.ID, err
	case KindVolume:
		in, err := into[v1input.VolumeInput](fields)
		if err != nil {
			return "", err
		}
		if create {
			v, err := m.CreateVolume(ctx, in.Mgmt())
			return v.ID, err
		}
		_, err = m.UpdateVolume(ctx, a.ID, in.Mgmt())
		return a.ID, err
	case KindTemplate:
		in, err := into[v1input.TemplateInput](fields)
		if err != nil {
			return "", err
		}
		if create {
			t, err := m.CreateTemplate(ctx, in.Mgmt())
			return t.ID, err
		}
		_, err = m.UpdateTemplate(ctx, a.ID, in.Mgmt())
		return a.ID, err
	case KindEndpoint:
		in, err := into[v1input.EndpointInput](fields)
		if err != nil {
			return "", err
		}
		if create {
			e, err := m.CreateEndpoint(ctx, in.Mgmt())
			return e.ID, err
		}
		_, err = m.UpdateEndpoint(ctx, a.ID, in.Mgmt())
		return a.ID, err
	}
	return "", fmt.Errorf("unknown kind %q", a.Kind)
}

func remove(ctx context.Context, m *mgmt.Service, a Action) error {
	switch a.Kind {
	case KindRegistryAuth:
		return m.DeleteRegistryAuth(ctx, a.ID)
	case KindVolume:
		return m.DeleteVolume(ctx, a.ID)
	case KindTemplate:
		return m.DeleteTemplate(ctx, a.ID)
	case KindEndpoint:
		return m.DeleteEndpoint(ctx, a.ID)
	}
	return fmt.Errorf("unknown kind %q", a.Kind)
}

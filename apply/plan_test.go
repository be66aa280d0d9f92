package apply

import (
	"strings"
	"testing"

	"berth/mgmt"
	"berth/store"
)

func parse(t *testing.T, doc string, env map[string]string) (File, error) {
	t.Helper()
	return Parse(strings.NewReader(doc), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func mustParse(t *testing.T, doc string) File {
	t.Helper()
	f, err := parse(t, doc, map[string]string{"TAG": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParse(t *testing.T) {
	f := mustParse(t, `{"templates": [{"name": "w", "imageName": "me/w:${TAG}", "ports": "8888/http,22/tcp"}],
		"endpoints": [{"name": "e", "template": "w", "workersMax": 2}]}`)
	if *f.Templates[0].ImageName != "me/w:v2" || len(*f.Templates[0].Ports) != 2 || *f.Endpoints[0].WorkersMax != 2 {
		t.Errorf("parsed: %+v %+v", f.Templates[0], f.Endpoints[0])
	}
	for doc, want := range map[string]string{
		`{`:                                   "not JSON",
		`[]`:                                  "cannot unmarshal array",
		`{"pods": []}`:                        `unknown field "pods"`,
		`{"templates": [{"imageName": "x"}]}`: "templates[0]: name is required",
		`{"templates": [{"name": "a", "imageName": "x"}, {"name": "a"}]}`: `"a" is named twice`,
		`{"templates": [{"name": "a", "imageNme": "x"}]}`:                 `unknown field "imageNme"`,
		`{"templates": [{"name": "a", "imageName": "${NOPE}"}]}`:          "not set: NOPE",
		`{"endpoints": [{"name": "e", "templateId": "abc"}]}`:             `"template", not templateId`,
		`{"endpoints": [{"name": "e"}]}`:                                  `"template" (a template's name) is required`,
		`{"templates": [{"name": "a", "containerRegistryAuthId": "x"}]}`:  `"registryAuth"`,
	} {
		if _, err := parse(t, doc, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", doc, err, want)
		}
	}
}

func ops(actions []Action) []string {
	var out []string
	for _, a := range actions {
		out = append(out, a.String())
	}
	return out
}

func TestPlan(t *testing.T) {
	file := mustParse(t, `{
		"registryAuths": [{"name": "ghcr", "username": "me", "password": "pw"}],
		"networkVolumes": [{"name": "models", "size": 20, "dataCenterId": "EU-RO-1"}],
		"templates": [{"name": "w", "imageName": "me/w:1", "isServerless": true, "registryAuth": "ghcr", "env": {"A": "1"}}],
		"endpoints": [{"name": "e", "template": "w", "networkVolume": "models", "workersMax": 2}]}`)

	// Nothing on the server: everything is created, references to new records.
	acts, err := Plan(file, State{}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"+ registry auth ghcr", "+ network volume models", "+ template w", "+ endpoint e"}
	if got := ops(acts); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("empty server: %q", got)
	}
	if acts[3].fields["templateId"] != "(new template w)" || acts[3].fields["networkVolumeId"] != "(new network volume models)" {
		t.Errorf("endpoint fields: %v", acts[3].fields)
	}

	// The same records on the server: unchanged.
	st := State{
		RegistryAuths: []mgmt.RegistryAuth{{ID: "r1", Name: "ghcr", Username: "me"}},
		Volumes:       []store.NetworkVolume{{ID: "v1", Name: "models", Size: 20, DataCenterID: "EU-RO-1"}},
		Templates: []store.Template{{ID: "t1", Name: "w", ImageName: "me/w:1", IsServerless: true, ContainerRegistryAuthID: "r1",
			Env: map[string]string{"A": "1"}, Ports: []string{}}},
		Endpoints: []store.Endpoint{{ID: "e1", Name: "e", TemplateID: "t1", NetworkVolumeID: "v1", WorkersMax: 2}},
	}
	acts, err = Plan(file, st, true)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"= registry auth ghcr (r1)", "= network volume models (v1)", "= template w (t1)", "= endpoint e (e1)"}
	if got := ops(acts); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("same records: %q", got)
	}

	// Changed fields are updated alone; records not in the file pruned,
	// endpoints before templates.
	st.Templates[0].ImageName = "me/w:0"
	st.Endpoints[0].WorkersMax = 5
	st.Templates = append(st.Templates, store.Template{ID: "t2", Name: "old"})
	st.Endpoints = append(st.Endpoints, store.Endpoint{ID: "e2", Name: "gone", TemplateID: "t2"})
	st.RegistryAuths[0].Username = "you"
	acts, err = Plan(file, st, true)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{`~ registry auth ghcr (r1): username "you" → "me", password "(hidden)" → "(hidden)"`, "= network volume models (v1)",
		`~ template w (t1): imageName "me/w:0" → "me/w:1"`, "~ endpoint e (e1): workersMax 5 → 2",
		"- endpoint gone (e2)", "- template old (t2)"}
	if got := ops(acts); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("changes:\n got %q\nwant %q", got, want)
	}
	if len(acts[2].fields) != 1 || acts[2].fields["imageName"] != "me/w:1" {
		t.Errorf("update sends only the changed fields: %v", acts[2].fields)
	}
	// Without prune nothing is deleted.
	acts, _ = Plan(file, st, false)
	for _, a := range acts {
		if a.Op == OpDelete {
			t.Errorf("deleted without prune: %s", a)
		}
	}

	// Ambiguous names and dangling references are errors.
	st.Endpoints = append(st.Endpoints, store.Endpoint{ID: "e3", Name: "e"})
	if _, err := Plan(file, st, false); err == nil || !strings.Contains(err.Error(), "2 records on the server") {
		t.Errorf("ambiguous: %v", err)
	}
	dangling := mustParse(t, `{"endpoints": [{"name": "e", "template": "nosuch"}]}`)
	if _, err := Plan(dangling, State{}, false); err == nil || !strings.Contains(err.Error(), `template "nosuch" is neither in the file nor on the server`) {
		t.Errorf("dangling: %v", err)
	}
	// A reference to a record only on the server is fine.
	onServer := mustParse(t, `{"endpoints": [{"name": "x", "template": "old"}]}`)
	acts, err = Plan(onServer, State{Templates: []store.Template{{ID: "t2", Name: "old"}}}, false)
	if err != nil || acts[0].fields["templateId"] != "t2" {
		t.Errorf("reference to the server's template: %v %v", acts, err)
	}
}

// TestPlanModelReferences: an endpoint's modelReferences are applied like
// its other fields: equal is unchanged, a different list is an update of
// that field alone.
func TestPlanModelReferences(t *testing.T) {
	file := mustParse(t, `{"templates": [{"name": "w", "imageName": "me/w:1", "isServerless": true}],
		"endpoints": [{"name": "e", "template": "w", "modelReferences": ["https://huggingface.co/acme/tiny:v1"]}]}`)
	st := State{
		Templates: []store.Template{{ID: "t1", Name: "w", ImageName: "me/w:1", IsServerless: true, Env: map[string]string{}, Ports: []string{}}},
		Endpoints: []store.Endpoint{{ID: "e1", Name: "e", TemplateID: "t1", ModelReferences: []string{"https://huggingface.co/acme/tiny:v1"}}},
	}
	acts, err := Plan(file, st, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := ops(acts); got[1] != "= endpoint e (e1)" {
		t.Errorf("same models: %q", got)
	}
	st.Endpoints[0].ModelReferences = nil
	acts, err = Plan(file, st, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := ops(acts); !strings.HasPrefix(got[1], "~ endpoint e (e1): modelReferences") || len(acts[1].fields) != 1 {
		t.Errorf("new models: %q %v", got, acts[1].fields)
	}
}

package compat

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const applyFile = `{
  "registryAuths":  [{"name": "ghcr", "username": "ci", "password": "${REGISTRY_PASSWORD}"}],
  "networkVolumes": [{"name": "models", "size": 10, "dataCenterId": "EU-RO-1"}],
  "templates": [
    {"name": "echo-tpl", "imageName": "me/echo:${TAG}", "isServerless": true, "registryAuth": "ghcr", "env": {"MODE": "ci"}}
  ],
  "endpoints": [
    {"name": "echo", "template": "echo-tpl", "networkVolume": "models", "computeType": "CPU", "workersMin": 0, "workersMax": 1},
    {"name": "spare", "template": "echo-tpl", "workersMax": 0}
  ]
}`

// TestApply: `berth apply -f FILE` through berth serve — a plan first, a
// dry run that changes nothing, creation, ids by name, idempotence,
// updates of what changed only, --prune, a refusal from mgmt that changes
// nothing; and `berth serve --apply FILE` at start-up.
func TestApply(t *testing.T) {
	t.Parallel()
	s := startBerth(t)
	dir := t.TempDir()
	n := 0
	write := func(doc string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("berth-%d.json", n))
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := []string{"REGISTRY_PASSWORD=s3cret", "TAG=v1"}
	berth := func(extra []string, args ...string) (string, string, int) {
		cmd := exec.Command(berthBinary(t), args...)
		cmd.Env = append(append(os.Environ(), "BERTH_URL="+s.URL, "BERTH_API_KEY="+s.Key), extra...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	file := write(applyFile)

	// A dry run shows the plan and changes nothing.
	out, errs, code := berth(env, "apply", "-f", file, "--dry-run", "-o", "table")
	if code != 0 || !strings.Contains(errs, "+ registry auth ghcr") || !strings.Contains(errs, "+ endpoint echo") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	var list []any
	s.rest("GET", "/v1/templates?includeEndpointBoundTemplates=true", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("a dry run created %d templates", len(list))
	}

	// A dry run refuses, exit 1, naming the action and the field, what the
	// real apply would refuse (mgmt's rules of each record): nothing made.
	for _, c := range []struct{ from, to, want string }{
		{`"workersMax": 1}`, `"workersMax": 1, "idleTimeout": -5}`, "create endpoint echo: idleTimeout"},
		{`"workersMin": 0, "workersMax": 1}`, `"workersMin": 3, "workersMax": 1}`, "create endpoint echo: workersMin"},
		{`"size": 10`, `"size": 5`, "create network volume models: size"},
		{`"name": "echo-tpl", "imageName"`, `"name": "echo\u001b[2J", "imageName"`, "create template \"echo\\x1b[2J\": name holds a control character"},
		{`"username": "ci"`, `"username": ""`, "create registry auth ghcr: username"},
		{`"computeType": "CPU"`, `"computeType": "TPU"`, "create endpoint echo: computeType"},
	} {
		doc := strings.Replace(applyFile, c.from, c.to, 1)
		if c.from == `"name": "echo-tpl", "imageName"` {
			doc = strings.ReplaceAll(doc, `"template": "echo-tpl"`, `"template": "echo\u001b[2J"`)
		}
		_, errs, code := berth(env, "apply", "-f", write(doc), "--dry-run")
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("dry run of %s: exit %d, want 1 naming %q\n%s", c.to, code, c.want, errs)
		}
	}
	s.rest("GET", "/v1/templates?includeEndpointBoundTemplates=true", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("a refused dry run created %d templates", len(list))
	}

	// Applied: created, ids by name.
	out, errs, code = berth(env, "apply", "-f", file, "-o", "json")
	var res struct {
		Actions []struct{ Kind, Name, Op, ID string }
		IDs     map[string]map[string]string
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
		t.Fatalf("apply: exit %d %v\n%s%s", code, err, out, errs)
	}
	epID := res.IDs["endpoints"]["echo"]
	if len(res.Actions) != 5 || epID == "" || res.IDs["templates"]["echo-tpl"] == "" {
		t.Fatalf("apply: %+v", res)
	}
	var ep struct {
		ID, TemplateID, NetworkVolumeID, ComputeType string
		WorkersMax                                   int
	}
	s.rest("GET", "/v1/endpoints/"+epID, nil, 200, &ep)
	var tpl struct{ ImageName, ContainerRegistryAuthID string }
	s.rest("GET", "/v1/templates/"+ep.TemplateID, nil, 200, &tpl)
	if ep.NetworkVolumeID != res.IDs["networkVolumes"]["models"] || ep.ComputeType != "CPU" || tpl.ImageName != "me/echo:v1" ||
		tpl.ContainerRegistryAuthID != res.IDs["registryAuths"]["ghcr"] {
		t.Errorf("records: %+v %+v", ep, tpl)
	}
	// A test reads an id by name.
	if out, errs, code := s.cli("endpoint", "get", "echo", "-o", "id"); code != 0 || strings.TrimSpace(out) != epID {
		t.Errorf("berth endpoint get echo -o id: exit %d %q %s", code, out, errs)
	}

	// Again: nothing to do.
	out, errs, code = berth(env, "apply", "-f", file, "-o", "table")
	if code != 0 || !strings.Contains(out, "0 change(s), 5 record(s) unchanged") || strings.Contains(errs, "~") || strings.Contains(errs, "+") {
		t.Errorf("second apply: exit %d\n%s%s", code, out, errs)
	}

	// Changed: only what changed is updated; the ids stay.
	file = write(strings.Replace(applyFile, `"workersMax": 1}`, `"workersMax": 2}`, 1))
	out, errs, code = berth(append(env, "TAG=v2"), "apply", "-f", file, "-o", "table")
	if code != 0 || !strings.Contains(errs, `~ template echo-tpl (`+ep.TemplateID+`): imageName "me/echo:v1" → "me/echo:v2"`) ||
		!strings.Contains(errs, `~ endpoint echo (`+epID+`): workersMax 1 → 2`) || !strings.Contains(out, "2 change(s)") {
		t.Errorf("update: exit %d\n%s%s", code, out, errs)
	}
	s.rest("GET", "/v1/endpoints/"+epID, nil, 200, &ep)
	if ep.WorkersMax != 2 {
		t.Errorf("workersMax after the update: %d", ep.WorkersMax)
	}

	// A refusal from mgmt names the action and changes nothing: the
	// whole plan is checked before its first change (the template's new
	// image is not applied either), and a dry run refuses it alike, also
	// where an update would break a rule with the record's other fields.
	bad := write(strings.Replace(applyFile, `"workersMax": 1}`, `"workersMax": 1, "idleTimeout": 99999}`, 1))
	for _, dry := range []string{"--dry-run", "--prune=false"} {
		_, errs, code = berth(append(env, "TAG=v3"), "apply", "-f", bad, dry)
		if code != 1 || !strings.Contains(errs, "update endpoint echo") || !strings.Contains(errs, "idleTimeout") {
			t.Errorf("refused apply %s: exit %d\n%s", dry, code, errs)
		}
	}
	s.rest("GET", "/v1/templates/"+ep.TemplateID, nil, 200, &tpl)
	if tpl.ImageName != "me/echo:v2" {
		t.Errorf("a refused apply changed the template's image to %s", tpl.ImageName)
	}
	minOverMax := write(strings.Replace(applyFile, `"workersMin": 0, "workersMax": 1}`, `"workersMin": 5}`, 1))
	if _, errs, code = berth(env, "apply", "-f", minOverMax, "--dry-run"); code != 1 || !strings.Contains(errs, "update endpoint echo: workersMin") {
		t.Errorf("dry run of workersMin over the endpoint's workersMax: exit %d\n%s", code, errs)
	}
	// An unknown field or an unset variable is the file's fault: exit 2.
	if _, errs, code := berth(env, "apply", "-f", write(`{"endpoints": [{"name": "x", "template": "echo-tpl", "workerMax": 1}]}`)); code != 2 || !strings.Contains(errs, "workerMax") {
		t.Errorf("typo: exit %d %s", code, errs)
	}
	if _, errs, code := berth(nil, "apply", "-f", file); code != 2 || !strings.Contains(errs, "REGISTRY_PASSWORD") {
		t.Errorf("unset variable: exit %d %s", code, errs)
	}

	// --prune deletes what the file no longer names.
	pruned := write(strings.Replace(applyFile, `,
    {"name": "spare", "template": "echo-tpl", "workersMax": 0}`, "", 1))
	out, errs, code = berth(append(env, "TAG=v2"), "apply", "-f", pruned, "--prune", "-o", "table")
	spare := res.IDs["endpoints"]["spare"]
	if code != 0 || !strings.Contains(errs, "- endpoint spare ("+spare+")") {
		t.Errorf("prune: exit %d\n%s%s", code, out, errs)
	}
	s.rest("GET", "/v1/endpoints/"+spare, nil, 404, nil)
	s.rest("GET", "/v1/endpoints/"+epID, nil, 200, nil)

	// berth serve --apply FILE: the records exist once it answers.
	fresh := startBerthEnv(t, append(env, "TAG=v2"), "--apply", file)
	var eps []struct{ Name string }
	fresh.rest("GET", "/v1/endpoints", nil, 200, &eps)
	if len(eps) != 2 {
		t.Errorf("berth serve --apply: endpoints %+v", eps)
	}
}

package apply

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth/mgmt"
	"berth/store"
)

// TestParseBuild: what a build may be; each refusal names the field.
func TestParseBuild(t *testing.T) {
	f := mustParse(t, `{"endpoints": [{"name": "w", "build": {"context": ".", "buildArgs": {"BASE_IMAGE": "b"}}, "workersMax": 1}]}`)
	if *f.Endpoints[0].Template != "w" {
		t.Errorf("a built endpoint without a template gets one of its name: %v", f.Endpoints[0].Template)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"no source", `{"endpoints": [{"name": "e", "build": {}}]}`, `endpoints[0] (e): build: give its source, "context" (a directory) or "git"`},
		{"two sources", `{"endpoints": [{"name": "e", "build": {"context": ".", "git": {"url": "https://h/r.git"}}}]}`, `"context" and "git" are mutually exclusive`},
		{"imageName too", `{"templates": [{"name": "t", "imageName": "me/x:1"}], "endpoints": [{"name": "e", "template": "t", "build": {"context": "."}}]}`,
			`endpoints[0] (e): build and templates[0] (t)'s "imageName" are mutually exclusive`},
		{"shared template", `{"templates": [{"name": "t"}], "endpoints": [{"name": "e", "template": "t", "build": {"context": "."}}, {"name": "f", "template": "t"}]}`,
			"template t is used by endpoints e, f"},
		{"unknown field", `{"endpoints": [{"name": "e", "build": {"contxt": "."}}]}`, `unknown field "contxt"`},
		{"unknown git field", `{"endpoints": [{"name": "e", "build": {"git": {"url": "https://h/r.git", "branch": "x"}}}]}`, `unknown field "branch"`},
		{"dockerfile leaves", `{"endpoints": [{"name": "e", "build": {"context": ".", "dockerfile": "../Dockerfile"}}]}`, `dockerfile "../Dockerfile" leaves the source tree`},
		{"dockerfile absolute", `{"endpoints": [{"name": "e", "build": {"context": ".", "dockerfile": "/etc/passwd"}}]}`, "must be relative to the context"},
		{"empty context", `{"endpoints": [{"name": "e", "build": {"context": " "}}]}`, "context is empty"},
		{"control in context", `{"endpoints": [{"name": "e", "build": {"context": "a\u001bb"}}]}`, "context holds a control character"},
		{"control in arg", `{"endpoints": [{"name": "e", "build": {"context": ".", "buildArgs": {"A": "x\u0007"}}}]}`, "buildArgs holds a control character"},
		{"bad arg name", `{"endpoints": [{"name": "e", "build": {"context": ".", "buildArgs": {"A-B": "x"}}}]}`, "is not a variable name"},
		{"bad target", `{"endpoints": [{"name": "e", "build": {"context": ".", "target": "a b"}}]}`, "is not a build stage name"},
		{"git file url", `{"endpoints": [{"name": "e", "build": {"git": {"url": "file:///srv/r"}}}]}`, "git.url"},
		{"git context leaves", `{"endpoints": [{"name": "e", "build": {"git": {"url": "https://h/r.git", "contextPath": "../x"}}}]}`, "git.contextPath"},
		{"git bad ref", `{"endpoints": [{"name": "e", "build": {"git": {"url": "https://h/r.git", "ref": "a..b"}}}]}`, "git.ref"},
	} {
		if _, err := parse(t, c.doc, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

// TestPlanBuild: a build is planned when the endpoint's template does not
// run the image of this source and these options, and not otherwise; a
// new endpoint's build follows its creation (workersMin 0 until built),
// an existing one's goes first.
func TestPlanBuild(t *testing.T) {
	doc := `{"endpoints": [{"name": "w", "computeType": "CPU", "workersMin": 1, "workersMax": 1,
		"build": {"context": "src", "buildArgs": {"BASE_IMAGE": "b"}}}]}`
	const digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	withDigest := func(f File, d string) File { f.Endpoints[0].Build.digest = d; return f }
	file := withDigest(mustParse(t, doc), digest)
	src := mgmt.BuildDigest(digest, "Dockerfile", "", map[string]string{"BASE_IMAGE": "b"}, "")
	image := mgmt.BuildImageName("w", src)
	tpl := store.Template{ID: "t1", Name: "w", ImageName: image, IsServerless: true, Env: map[string]string{}, Ports: []string{}}
	ep := store.Endpoint{ID: "e1", Name: "w", TemplateID: "t1", ComputeType: "CPU", WorkersMin: 1, WorkersMax: 1}
	done := store.Build{ID: "b1", EndpointID: "e1", Status: store.BuildCompleted, SourceDigest: src, ImageName: image, Dockerfile: "Dockerfile"}
	built := State{Templates: []store.Template{tpl}, Endpoints: []store.Endpoint{ep}, Builds: map[string][]store.Build{"e1": {done}}}
	other := built
	other.Templates = []store.Template{tpl}
	other.Templates[0].ImageName = "berth/w:000000000000"

	for _, c := range []struct {
		name string
		file File
		st   State
		want []string
	}{
		{"nothing yet", file, State{}, []string{"+ template w", "+ endpoint w", "+ build w: context src → " + image}},
		{"built and running", file, built, []string{"= template w (t1)", "= endpoint w (e1)", "= build w (b1): " + image}},
		{"another image runs", file, other, []string{"+ build w: context src → " + image, "= template w (t1)", "= endpoint w (e1)"}},
		{"source changed", withDigest(mustParse(t, doc), strings.Repeat("f", 64)), built,
			[]string{"+ build w: context src → " + mgmt.BuildImageName("w", mgmt.BuildDigest(strings.Repeat("f", 64), "Dockerfile", "", map[string]string{"BASE_IMAGE": "b"}, "")), "= template w (t1)", "= endpoint w (e1)"}},
		{"option changed", withDigest(mustParse(t, strings.Replace(doc, `"b"}`, `"c"}`, 1)), digest), built,
			[]string{"+ build w: context src → " + mgmt.BuildImageName("w", mgmt.BuildDigest(digest, "Dockerfile", "", map[string]string{"BASE_IMAGE": "c"}, "")), "= template w (t1)", "= endpoint w (e1)"}},
		{"git at a branch", mustParse(t, `{"endpoints": [{"name": "w", "build": {"git": {"url": "https://h/r.git", "ref": "main"}}}]}`), built,
			[]string{"+ build w: git https://h/r.git at main", "= template w (t1)", "= endpoint w (e1)"}},
	} {
		acts, err := Plan(c.file, c.st, false)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ops(acts); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}

	// A new endpoint is made with workersMin 0 and a placeholder image;
	// the build sets the workersMin asked for.
	acts, _ := Plan(file, State{}, false)
	if acts[0].fields["imageName"] != placeholderImage || acts[1].fields["workersMin"] != 0 || acts[2].build.wantMin != 1 || acts[2].build.endpoint != "(new endpoint w)" {
		t.Errorf("new endpoint: %v %v %+v", acts[0].fields, acts[1].fields, acts[2].build)
	}
	if err := Check(acts, State{}); err != nil {
		t.Errorf("check: %v", err)
	}
	// A git build at a commit already built and running: unchanged.
	commit := strings.Repeat("a", 40)
	gitFile := mustParse(t, `{"endpoints": [{"name": "w", "build": {"git": {"url": "https://h/r.git", "ref": "`+commit+`", "credential": "ci"}}}]}`)
	gst := built
	gst.Builds = map[string][]store.Build{"e1": {{ID: "b2", Status: store.BuildCompleted, ImageName: image, Dockerfile: "Dockerfile",
		CommitHash: commit, Git: &store.GitSource{URL: "https://h/r.git", Ref: commit}}}}
	gst.GitCredentials = []mgmt.GitCredential{{ID: "gc1", Name: "ci"}}
	acts, err := Plan(gitFile, gst, false)
	if err != nil || acts[2].String() != "= build w (b2): "+image {
		t.Errorf("git at a built commit: %q %v", ops(acts), err)
	}
	gst.GitCredentials = nil
	if _, err := Plan(gitFile, gst, false); err == nil || !strings.Contains(err.Error(), `git credential "ci"`) {
		t.Errorf("unknown credential: %v", err)
	}
}

// TestPackDir: the same files pack to the same digest; a context that is
// not a directory is refused.
func TestPackDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := PackDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove()
	b, err := PackDir(dir, "Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove()
	if a.Digest != b.Digest || a.Size == 0 {
		t.Errorf("digests %s %s", a.Digest, b.Digest)
	}
	if _, err := PackDir(filepath.Join(dir, "Dockerfile"), ""); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file as context: %v", err)
	}
	if got := ContextDir("/srv/ci", "../w"); got != "/srv/w" {
		t.Errorf("ContextDir: %s", got)
	}
}

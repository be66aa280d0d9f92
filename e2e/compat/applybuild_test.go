package compat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
)

// TestApplyBuild: `berth apply` of an endpoint with a "build" (a context
// directory next to the file), through berth serve and the berth binary:
// built and released, a job answered by the built worker; the same file
// again plans no change and builds nothing; a handler change builds and
// releases anew; a failing Dockerfile fails apply with the build's error
// and the old release serves on.
func TestApplyBuild(t *testing.T) {
	base := sdkBaseImage(t)
	s := startBerth(t)
	dir := t.TempDir()
	w := filepath.Join(dir, "worker")
	if err := os.MkdirAll(w, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, body string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	handler := func(v int) string {
		return fmt.Sprintf("import runpod\n\ndef handler(job):\n    return {\"v\": %d, \"in\": job[\"input\"]}\n\nrunpod.serverless.start({\"handler\": handler})\n", v)
	}
	dockerfile := "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCMD [\"python3\", \"-u\", \"/handler.py\"]\nCOPY handler.py /handler.py\n"
	write(filepath.Join(w, "handler.py"), handler(1))
	write(filepath.Join(w, "Dockerfile"), dockerfile)
	name := dockertest.Unique("applied-") // the image name follows it: runs do not share images
	file := filepath.Join(dir, "berth.json")
	write(file, `{"endpoints": [{"name": "`+name+`", "computeType": "CPU", "workersMax": 1, "idleTimeout": 60,
		"build": {"context": "worker", "buildArgs": {"BASE_IMAGE": "`+base+`"}}}]}`)
	var id string
	removeBuiltImages(t, s, &id)
	apply := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errs, code := s.cliFor(10*time.Minute, append([]string{"apply", "-f", file}, args...)...)
		if code != want {
			t.Fatalf("berth apply %v: exit %d, want %d\n%s%s", args, code, want, out, errs)
		}
		return out, errs
	}
	answer := func(v int) {
		t.Helper()
		out := s.runsync(t, id, map[string]any{"n": 1})
		var o struct{ V int }
		if json.Unmarshal(out, &o); o.V != v {
			t.Fatalf("runsync: %s, want v %d", out, v)
		}
	}

	// A dry run plans the build and changes nothing.
	if _, errs := apply(0, "--dry-run"); !strings.Contains(errs, "+ build "+name+": context worker → berth/"+name+":") {
		t.Fatalf("dry run:\n%s", errs)
	}
	out, errs := apply(0, "-o", "json")
	var res struct {
		IDs map[string]map[string]string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("apply -o json: %v\n%s", err, out)
	}
	id = res.IDs["endpoints"][name]
	if id == "" || res.IDs["builds"][name] == "" || !strings.Contains(errs, "release v") {
		t.Fatalf("first apply: %s\n%s", out, errs)
	}
	answer(1)
	first := s.builds(t, id)
	if len(first) != 1 || first[0].Status != "COMPLETED" {
		t.Fatalf("builds: %+v", first)
	}

	// Again: no change, no build.
	out, errs = apply(0, "-o", "table")
	if !strings.Contains(out, "0 change(s)") || !strings.Contains(errs, "= build "+name+" ("+first[0].ID+")") || strings.Contains(errs, "+ ") {
		t.Fatalf("second apply:\n%s%s", out, errs)
	}
	if bs := s.builds(t, id); len(bs) != 1 {
		t.Fatalf("the same source built again: %+v", bs)
	}

	// A handler change: a new build and release, answered by its worker.
	write(filepath.Join(w, "handler.py"), handler(2))
	if _, errs = apply(0); !strings.Contains(errs, "+ build "+name) || !strings.Contains(errs, "release v") {
		t.Fatalf("apply of a change:\n%s", errs)
	}
	answer(2)

	// A failing Dockerfile: apply fails with the build's error, the old
	// release serves on.
	write(filepath.Join(w, "Dockerfile"), dockerfile+"RUN echo about to fail && exit 3\n")
	if _, errs = apply(1); !strings.Contains(errs, "FAILED") || !strings.Contains(errs, "exit 3") {
		t.Fatalf("a failing build:\n%s", errs)
	}
	answer(2)

	// build and a template's imageName: refused naming the field (exit 2).
	write(file, `{"templates": [{"name": "t", "imageName": "me/x:1"}], "endpoints": [{"name": "x", "template": "t", "build": {"context": "worker"}}]}`)
	if _, errs = apply(2); !strings.Contains(errs, `"imageName" are mutually exclusive`) {
		t.Fatalf("build with imageName:\n%s", errs)
	}
}

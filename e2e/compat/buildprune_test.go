package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
)

// TestBuildImagesPruned: with --build-images-kept 2, four builds of one
// endpoint (tiny FROM scratch images, through the builds API) leave the
// images of the last two releases in the daemon and remove the older
// ones; a rollback to a kept release works, one to a pruned release is
// refused naming why; the removals are counted on /metrics. A bad value
// of the flag is refused at start.
func TestBuildImagesPruned(t *testing.T) {
	docker := dockertest.Require(t)
	out, err := exec.Command(berthBinary(t), "serve", "--build-images-kept", "0", "--data", t.TempDir(), "--addr", "127.0.0.1:0").CombinedOutput()
	if code := clientkit.ExitCode(err); code != 2 || !strings.Contains(string(out), "--build-images-kept") {
		t.Errorf("--build-images-kept 0: exit %d %s, want 2 naming the flag", code, out)
	}
	s := startBerth(t, "--build-images-kept", "2")
	var tpl, ep struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "prune", "imageName": "berth/pending-first-build:none", "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "prune-" + dockertest.Unique(""), "templateId": tpl.ID, "computeType": "CPU", "workersMin": 0, "workersMax": 1}, 200, &ep)
	removeBuiltImages(t, s, &ep.ID)
	exists := func(ref string) bool {
		_, err := docker.ImageInspect(context.Background(), ref)
		return err == nil
	}
	var built []build
	for i := 1; i <= 4; i++ {
		tarball := contextTar(t, map[string]string{"Dockerfile": "FROM scratch\nCOPY f /f\n", "f": fmt.Sprintf("release %d %s\n", i, t.Name())})
		code, body := s.postBuild(t, ep.ID, "", "application/x-tar", bytes.NewReader(tarball))
		var b build
		if json.Unmarshal(body, &b); code != 202 {
			t.Fatalf("build %d: %d %s", i, code, body)
		}
		eventually(t, "build "+b.ID+" done", func() bool {
			s.rest("GET", "/v2/serverless/"+ep.ID+"/builds/"+b.ID, nil, 200, &b)
			return b.Status != "PENDING" && b.Status != "BUILDING"
		})
		if b.Status != "COMPLETED" || b.ReleaseVersion == nil {
			t.Fatalf("build %d: %+v", i, b)
		}
		built = append(built, b)
	}
	eventually(t, "the two oldest build images removed", func() bool {
		return !exists(built[0].ImageName) && !exists(built[1].ImageName)
	})
	for _, b := range built[2:] {
		if !exists(b.ImageName) {
			t.Errorf("%s (a kept release's image) was removed", b.ImageName)
		}
	}
	var pb struct{ ImagePrunedAt *time.Time }
	s.rest("GET", "/v2/serverless/"+ep.ID+"/builds/"+built[0].ID, nil, 200, &pb)
	if pb.ImagePrunedAt == nil {
		t.Errorf("the pruned build does not say so")
	}
	if !strings.Contains(s.Logs.String(), "build image pruned") {
		t.Errorf("no removal logged")
	}
	_, metrics := s.do("GET", "/metrics", nil)
	if !strings.Contains(string(metrics), `berth_build_images_pruned_total{result="removed"} 2`) {
		t.Errorf("metrics do not count the two removals:\n%s", grepLines(string(metrics), "pruned"))
	}

	// Back onto the third build's release (kept); the fourth's image stays
	// (it is one of the last two releases' still).
	s.rest("POST", "/v2/serverless/"+ep.ID+"/rollback", map[string]any{"version": *built[2].ReleaseVersion}, 200, nil)
	var tnow struct{ ImageName string }
	s.rest("GET", "/v1/templates/"+tpl.ID, nil, 200, &tnow)
	if tnow.ImageName != built[2].ImageName {
		t.Errorf("after the rollback the template runs %s, want %s", tnow.ImageName, built[2].ImageName)
	}
	code, body := s.do("POST", "/v2/serverless/"+ep.ID+"/rollback", map[string]any{"version": *built[0].ReleaseVersion})
	if code != 400 || !strings.Contains(string(body), "pruned") || !strings.Contains(string(body), "--build-images-kept") {
		t.Errorf("rollback to a pruned release: %d %s, want 400 saying it was pruned", code, body)
	}
	if !exists(built[3].ImageName) || !exists(built[2].ImageName) {
		t.Errorf("a kept image went after the rollback")
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

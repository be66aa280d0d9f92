package compat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
)

// TestSecretBuildArg: `berth deploy --build-secret TOKEN` (the value from
// the environment) passes the value to the build — the step prints its
// SHA-256 — but the value is in no API answer, no build log (the step
// printing it is scrubbed), no line of Berth's log, nowhere in berth.db's
// bytes, and not in the command's output. Another value makes another
// image name; a secret through the API's header does the same.
func TestSecretBuildArg(t *testing.T) {
	base := dockertest.BuildGoImage(t, "berth/e2e/compat/testdata/buildsecret")
	s := startBerth(t)
	secret := "sekrit-" + dockertest.Unique("")
	dir := filepath.Join(t.TempDir(), "secretive")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nARG TOKEN\nRUN [\"/app\"]\n"), 0o644)
	name := "secretive-" + dockertest.Unique("")
	cmd := exec.Command(berthBinary(t), "deploy", dir, "--name", name, "--compute-type", "CPU", "--build-secret", "TOKEN", "--build-log")
	cmd.Env = append(os.Environ(), "BERTH_URL="+s.URL, "BERTH_API_KEY="+s.Key, "TOKEN="+secret)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	epID := strings.TrimSpace(out.String())
	var asJSON struct{ ID string }
	if json.Unmarshal(out.Bytes(), &asJSON) == nil { // piped: the endpoint as JSON
		epID = asJSON.ID
	}
	removeBuiltImages(t, s, &epID)
	if code := clientkit.ExitCode(err); code != 0 {
		t.Fatalf("deploy: exit %d\n%s", code, errOut.String())
	}
	sum := sha256.Sum256([]byte(secret))
	bs := s.builds(t, epID)
	if len(bs) != 1 || bs[0].Status != "COMPLETED" {
		t.Fatalf("builds: %+v", bs)
	}
	_, logBody := s.do("GET", "/v2/serverless/"+epID+"/builds/"+bs[0].ID+"/logs?follow=false", nil)
	if !strings.Contains(string(logBody), "token sha256 "+hex.EncodeToString(sum[:])) {
		t.Errorf("the build did not receive the secret (its step's SHA-256 line is not in the log):\n%s", logBody)
	}
	if !strings.Contains(string(logBody), "the token is ***") {
		t.Errorf("the step echoing the secret is not scrubbed:\n%s", logBody)
	}
	var view struct{ SecretBuildArgs []string }
	_, one := s.do("GET", "/v2/serverless/"+epID+"/builds/"+bs[0].ID, nil)
	json.Unmarshal(one, &view)
	if fmt.Sprint(view.SecretBuildArgs) != "[TOKEN]" {
		t.Errorf("the build does not name its secret arg: %s", one)
	}

	// Another value through the API's header: another image; a bad header
	// is refused without echoing it.
	tarball := contextTar(t, map[string]string{"Dockerfile": "FROM " + base + "\nARG TOKEN\nRUN [\"/app\"]\n"})
	post := func(hdr string) (int, []byte) {
		req, _ := http.NewRequest("POST", s.URL+"/v2/serverless/"+epID+"/builds", bytes.NewReader(tarball))
		req.Header.Set("Authorization", "Bearer "+s.Key)
		req.Header.Set("Content-Type", "application/x-tar")
		req.Header.Set("X-Berth-Build-Secret", hdr)
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(res.Body)
		return res.StatusCode, b.Bytes()
	}
	if code, body := post(secret + "-no-equals"); code != 400 || strings.Contains(string(body), secret) {
		t.Errorf("a bad secret header: %d %s", code, body)
	}
	other := secret + "-2"
	var b1, b2 build
	code, body := post("TOKEN=" + secret)
	if json.Unmarshal(body, &b1); code != 202 {
		t.Fatalf("a build with the secret in the header: %d %s", code, body)
	}
	code, body = post("TOKEN=" + other)
	if json.Unmarshal(body, &b2); code != 202 || b2.ImageName == b1.ImageName {
		t.Fatalf("a build with another secret value: %d %s (the first's image %s)", code, body, b1.ImageName)
	}
	for _, b := range []*build{&b1, &b2} {
		eventually(t, "build "+b.ID+" done", func() bool {
			s.rest("GET", "/v2/serverless/"+epID+"/builds/"+b.ID, nil, 200, b)
			return b.Status == "COMPLETED" || b.Status == "FAILED"
		})
		if b.Status != "COMPLETED" {
			t.Errorf("build %s: %+v", b.ID, *b)
		}
	}
	var answers []byte
	for _, p := range []string{"/builds", "/builds/" + b2.ID, "/builds/" + b2.ID + "/logs?follow=false", "/releases", ""} {
		_, a := s.do("GET", "/v2/serverless/"+epID+p, nil)
		answers = append(answers, a...)
	}
	db, err := os.ReadFile(filepath.Join(s.Data, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"an API answer": string(answers) + string(body), "berth.db": string(db),
		"Berth's log": s.Logs.String(), "deploy's output": out.String() + errOut.String()} {
		for _, v := range []string{secret, other} {
			if strings.Contains(text, v) {
				t.Errorf("%s holds the secret value %q", what, v)
			}
		}
	}
}

package v1api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"berth/internal/apitest"
)

// TestApplyMultipart: POST /v1/apply with its build contexts as
// multipart parts (berth apply's form): a dry run plans the build with
// the image the context's digest names; a part naming no built endpoint,
// a missing file part or a file refused is 400, and nothing is made.
func TestApplyMultipart(t *testing.T) {
	e := apitest.NewJobEnv(t, apitest.Unvalidated)
	file := `{"endpoints": [{"name": "mp", "workersMax": 1, "build": {"context": "w"}}, {"name": "plain", "template": "mp-other"}],
		"templates": [{"name": "mp-other", "imageName": "me/x:1", "isServerless": true}]}`
	post := func(parts ...[2]string) (int, string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, p := range parts {
			w, _ := mw.CreateFormField(p[0])
			io.WriteString(w, p[1])
		}
		mw.Close()
		req, _ := http.NewRequest("POST", e.Base+"/v1/apply?dryRun=true", &body)
		req.Header.Set("Authorization", "Bearer "+apitest.Key)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := post([2]string{"file", file}, [2]string{"context.0", "a tar, as far as the plan cares"})
	var res struct {
		Actions []struct{ Kind, Name, Op, Detail string }
	}
	if code != 200 || json.Unmarshal([]byte(body), &res) != nil {
		t.Fatalf("dry run: %d %s", code, body)
	}
	last := res.Actions[len(res.Actions)-1]
	if last.Kind != "build" || last.Op != "build" || last.Name != "mp" || !strings.Contains(last.Detail, "context w → berth/mp:") {
		t.Errorf("the build's action: %+v", res.Actions)
	}
	for _, c := range []struct {
		parts [][2]string
		want  string
	}{
		{[][2]string{{"file", file}}, "the context w was not sent"},
		{[][2]string{{"file", file}, {"context.1", "x"}}, `"context.1" names no endpoint`},
		{[][2]string{{"file", file}, {"context.0", "x"}, {"context.0", "y"}}, "given twice"},
		{[][2]string{{"context.0", "x"}}, `want "file" (first)`},
		{nil, `no part "file"`},
		{[][2]string{{"file", strings.Replace(file, `"context": "w"`, `"context": "w", "dockerfile": "../D"`, 1)}}, "leaves the source tree"},
	} {
		code, body := post(c.parts...)
		var msg struct{ Message string }
		if json.Unmarshal([]byte(body), &msg); code != 400 || !strings.Contains(msg.Message, c.want) {
			t.Errorf("%v: %d %s, want 400 naming %q", c.parts, code, body, c.want)
		}
	}
	if r := e.Do("GET", "/v1/endpoints", "Bearer "+apitest.Key, nil); strings.Contains(string(r.Body), `"mp"`) {
		t.Errorf("a refused or dry apply made the endpoint: %s", r.Body)
	}
}

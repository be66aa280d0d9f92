package apitest

import (
	"encoding/json"
	"net/http"
	"strings"

	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

// J is a JSON object of a request or answer.
type J = map[string]any

// NewTemplate creates a template (POST /v1/templates) and returns it.
func (e *Env) NewTemplate(name, image string, extra J) store.Template {
	e.T.Helper()
	body := J{"name": name, "imageName": image}
	for k, v := range extra {
		body[k] = v
	}
	var t store.Template
	e.Must(http.StatusOK, "POST", "/v1/templates", body, &t)
	return t
}

// NewEndpoint creates an endpoint (POST /v1/endpoints) and returns it.
func (e *Env) NewEndpoint(templateID string, extra J) store.Endpoint {
	e.T.Helper()
	body := J{"templateId": templateID}
	for k, v := range extra {
		body[k] = v
	}
	var ep store.Endpoint
	e.Must(http.StatusOK, "POST", "/v1/endpoints", body, &ep)
	return ep
}

// Count is the length of the list GET path answers.
func (e *Env) Count(path string) int {
	e.T.Helper()
	var list []J
	e.Must(http.StatusOK, "GET", path, nil, &list)
	return len(list)
}

// PodJSON is a pod answer with the view fields.
type PodJSON struct {
	store.Pod
	Image          string               `json:"image"`
	CostPerHr      float64              `json:"costPerHr"`
	ConsumerUserID string               `json:"consumerUserId"`
	Machine        *J                   `json:"machine"`
	NetworkVolume  *store.NetworkVolume `json:"networkVolume"`
	SavingsPlans   *[]J                 `json:"savingsPlans"`
	Template       *store.Template      `json:"template"`
	EndpointID     string               `json:"endpointId"`
	State          string               `json:"state"`
}

// NewPod creates a pod (POST /v1/pods) and returns it.
func (e *Env) NewPod(body J) PodJSON {
	e.T.Helper()
	var p PodJSON
	e.Must(http.StatusCreated, "POST", "/v1/pods", body, &p)
	return p
}

// VolumeJSON is a network volume answer.
type VolumeJSON struct {
	store.NetworkVolume
	UsedBytes int64  `json:"usedBytes"`
	Path      string `json:"path"`
}

// NewVolume creates a network volume (POST /v1/networkvolumes) and returns
// it.
func (e *Env) NewVolume(name string, size int) VolumeJSON {
	e.T.Helper()
	var v VolumeJSON
	e.Must(http.StatusOK, "POST", "/v1/networkvolumes", J{"name": name, "size": size, "dataCenterId": mgmt.DataCenterID}, &v)
	return v
}

// AuthJSON is a registry auth answer.
type AuthJSON struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Username string `json:"username"`
}

// NewRegistryAuth creates a registry auth (POST /v1/containerregistryauth)
// and returns it.
func (e *Env) NewRegistryAuth(name, user, pass string) AuthJSON {
	e.T.Helper()
	var a AuthJSON
	e.Must(http.StatusOK, "POST", "/v1/containerregistryauth", J{"name": name, "username": user, "password": pass}, &a)
	return a
}

// Endpoint creates an endpoint of workers running echo:latest (a template
// of its own) with the extra fields given, and returns its id.
func (e *Env) Endpoint(extra J) string {
	e.T.Helper()
	tpl := e.Admin("POST", "/v1/templates", J{"name": "t-" + queue.NewID(6), "imageName": "echo:latest", "isServerless": true}, 200)
	body := J{"templateId": tpl["id"]}
	for k, v := range extra {
		body[k] = v
	}
	ep := e.Admin("POST", "/v1/endpoints", body, 200)
	return ep["id"].(string)
}

// MustProblem checks a REST v2 error: its status and an RFC 9457 body
// whose detail mentions each of words.
func (e *Env) MustProblem(want int, method, path string, body any, words ...string) {
	e.T.Helper()
	code, out := e.Call(method, path, body)
	if code != want {
		e.T.Fatalf("%s %s: got %d, want %d: %s", method, path, code, want, out)
	}
	var p struct {
		Title  string
		Status int
		Detail string
		Errors []string
	}
	if err := json.Unmarshal(out, &p); err != nil || p.Title == "" || p.Status != want || p.Detail == "" {
		e.T.Fatalf("%s %s: not a problem body (%v): %s", method, path, err, out)
	}
	all := p.Detail + "\n" + strings.Join(p.Errors, "\n")
	for _, w := range words {
		if !strings.Contains(all, w) {
			e.T.Errorf("%s %s: detail and errors %q do not mention %q", method, path, all, w)
		}
	}
}

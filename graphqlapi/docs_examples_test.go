package graphqlapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// The shapes of RunPod's GraphQL documentation examples: the key as
// ?api_key=, locations as country codes, the -fb name suffix.

// docs posts a document the way the documentation's curl examples do: the
// key in the URL, no Authorization header.
func (e *env) docs(key, query string) (int, gqlReply) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]string{"query": query})
	res, err := http.Post(e.base+"/graphql?api_key="+key, "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	r := gqlReply{Code: res.StatusCode}
	json.Unmarshal(out, &r)
	return res.StatusCode, r
}

func TestDocumentationExamples(t *testing.T) {
	a6000 := gpu.Device{Index: 0, UUID: "GPU-a6000", Name: "NVIDIA RTX A6000", TypeID: "NVIDIA RTX A6000", MemoryMiB: 49140}
	e := newEnv(t, withFake([]gpu.Device{a6000}, "me/tensorflow"))

	if code, r := e.docs("wrong", `query { myself { id } }`); code != http.StatusUnauthorized || len(r.Errors) != 1 {
		t.Errorf("?api_key=wrong: %d %+v", code, r.Errors)
	}
	code, r := e.docs(testKey, `mutation { saveTemplate(input: { containerDiskInGb: 5, dockerArgs: "python handler.py", env: [ { key: "key1", value: "value1" }, { key: "key2", value: "value2" } ], imageName: "me/hello:latest", isServerless: true, name: "Generated Serverless Template", readme: "## Hello, World!", volumeInGb: 0 }) { containerDiskInGb dockerArgs env { key value } id imageName isServerless name readme } }`)
	var tpl pyTemplate
	r.ok(t, "saveTemplate", &tpl)
	if code != 200 || tpl.DockerArgs != "python handler.py" || !tpl.IsServerless {
		t.Errorf("documented saveTemplate: %d %+v", code, tpl)
	}

	// locations as countries; "-fb" turns FlashBoot on.
	_, r = e.docs(testKey, `mutation { saveEndpoint(input: { gpuIds: "AMPERE_16", idleTimeout: 5, locations: "US,RO", name: "Generated Endpoint -fb", networkVolumeId: "", scalerType: "QUEUE_DELAY", scalerValue: 4, templateId: "`+tpl.ID+`", workersMax: 3, workersMin: 0 }) { gpuIds id idleTimeout locations name scalerType scalerValue templateId workersMax workersMin flashBootType } }`)
	var ep pyEndpoint
	r.ok(t, "saveEndpoint", &ep)
	var us []string
	for _, dc := range mgmt.DataCenters {
		if strings.HasPrefix(dc, "US-") {
			us = append(us, dc)
		}
	}
	if ep.FlashBootType != "FLASHBOOT" || ep.Locations != strings.Join(append(us, "EU-RO-1"), ",") {
		t.Errorf("documented saveEndpoint: %+v", ep)
	}
	var rec store.Endpoint
	e.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &rec)
	if !rec.Flashboot || len(rec.Warnings) != 0 || !reflect.DeepEqual(rec.DataCenterIDs, append(us, "EU-RO-1")) {
		t.Errorf("/v1 endpoint: flashboot %v, data centres %v, warnings %v", rec.Flashboot, rec.DataCenterIDs, rec.Warnings)
	}
	// The documented endpoint list, discount included.
	_, r = e.docs(testKey, `query Endpoints { myself { endpoints { gpuIds id idleTimeout locations name networkVolumeId pods { desiredStatus } scalerType scalerValue templateId workersMax workersMin } serverlessDiscount { discountFactor type expirationDate } } }`)
	var my struct {
		Endpoints []struct {
			Pods []struct{ DesiredStatus string }
		}
		ServerlessDiscount *struct{ DiscountFactor float64 }
	}
	r.ok(t, "myself", &my)
	if len(my.Endpoints) != 1 || my.Endpoints[0].Pods == nil || len(my.Endpoints[0].Pods) != 0 || my.ServerlessDiscount != nil {
		t.Errorf("documented endpoint list: %+v", my)
	}
	// Modify (with id), then delete.
	_, r = e.docs(testKey, `mutation { saveEndpoint(input: { id: "`+ep.ID+`", gpuIds: "AMPERE_16", name: "Generated Endpoint -fb", templateId: "`+tpl.ID+`", workersMax: 0 }) { id gpuIds name templateId workersMax } }`)
	r.ok(t, "saveEndpoint", nil)
	e.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &rec)
	if rec.WorkersMax != 0 || rec.Version != 1 {
		t.Errorf("after the documented modify: workersMax %d version %d", rec.WorkersMax, rec.Version)
	}
	_, r = e.docs(testKey, `mutation { deleteEndpoint(id: "`+ep.ID+`") }`)
	r.ok(t, "deleteEndpoint", nil)

	// A country with no data centre Berth knows is refused, naming it.
	_, r = e.docs(testKey, `mutation { saveEndpoint(input: { gpuIds: "AMPERE_16", locations: "GB", name: "x", templateId: "`+tpl.ID+`" }) { id } }`)
	r.refused(t, "saveEndpoint", "locations", `"GB"`)

	// The documented on-demand pod.
	_, r = e.docs(testKey, `mutation { podFindAndDeployOnDemand( input: { cloudType: ALL, gpuCount: 1, volumeInGb: 40, containerDiskInGb: 40, minVcpuCount: 2, minMemoryInGb: 15, gpuTypeId: "NVIDIA RTX A6000", name: "Runpod Tensorflow", imageName: "me/tensorflow", dockerArgs: "", ports: "8888/http", volumeMountPath: "/workspace", env: [{ key: "JUPYTER_PASSWORD", value: "secret" }] } ) { id imageName env machineId machine { podHostId } } }`)
	var pod pyPod
	r.ok(t, "podFindAndDeployOnDemand", &pod)
	if !reflect.DeepEqual(pod.Env, []string{"JUPYTER_PASSWORD=secret"}) || pod.Machine.PodHostID != pod.ID {
		t.Errorf("documented pod: %+v", pod)
	}
	if n := e.count(store.Endpoints); n != 0 {
		t.Errorf("%d endpoints left", n)
	}
}

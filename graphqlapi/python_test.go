package graphqlapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// The documents runpod-python sends (testdata/runpod-python), sent the
// way it sends them: {"query": "<inline literals>"}, Bearer key. They are
// runpod-python 1.12.0's (commit 07fc6e2b): testdata/clients.json records
// it, and TestFixturesMatchClients regenerates them from the SDK's own
// generator modules in ../shared/thirdparty and compares.

type envKV struct{ Key, Value string }

type pyTemplate struct {
	ID, Name, ImageName, DockerArgs string
	ContainerDiskInGb, VolumeInGb   int
	VolumeMountPath                 *string
	Ports                           string
	Env                             []envKV
	IsServerless                    bool
}

type pyEndpoint struct {
	ID, Name, TemplateID, GpuIds string
	NetworkVolumeID              *string
	Locations                    string
	IdleTimeout                  int
	ScalerType                   string
	ScalerValue                  int
	WorkersMin, WorkersMax       int
	AllowedCudaVersions          string
	GpuCount                     int
	FlashBootType                string
}

func createTemplate(t *testing.T, e *env, name, image, args string) pyTemplate {
	t.Helper()
	var tpl pyTemplate
	e.python(fixture(t, "runpod-python/create_template.graphql", "name", name, "image", image, "dockerArgs", args)).ok(t, "saveTemplate", &tpl)
	return tpl
}

func TestPythonTemplateAndEndpoint(t *testing.T) {
	e := newEnv(t)

	// runpod.create_template(name, image, docker_start_cmd, env={...}, is_serverless=True)
	tpl := createTemplate(t, e, "echo-tpl", "berth/echo:1", `python -u handler.py --greeting \"hi there\"`)
	want := pyTemplate{ID: tpl.ID, Name: "echo-tpl", ImageName: "berth/echo:1", DockerArgs: `python -u handler.py --greeting "hi there"`,
		ContainerDiskInGb: 10, VolumeInGb: 0, VolumeMountPath: ptr("/workspace"), Ports: "",
		Env: []envKV{{"GREETING", "hello"}, {"MODE", "graphql test"}}, IsServerless: true}
	if len(tpl.ID) != 10 || !reflect.DeepEqual(tpl, want) {
		t.Errorf("saveTemplate:\n got %+v\nwant %+v", tpl, want)
	}
	// The same template through /v1.
	var v1t store.Template
	e.rest("GET", "/v1/templates/"+tpl.ID, nil, 200, &v1t)
	if !reflect.DeepEqual(v1t.DockerStartCmd, []string{"python", "-u", "handler.py", "--greeting", "hi there"}) ||
		len(v1t.Ports) != 0 || v1t.Env["MODE"] != "graphql test" || !v1t.IsServerless || v1t.ContainerDiskInGb != 10 {
		t.Errorf("/v1 template: %+v", v1t)
	}

	// runpod.create_endpoint(name, template_id) with its defaults.
	var ep pyEndpoint
	e.python(fixture(t, "runpod-python/create_endpoint.graphql", "name", "echo", "templateId", tpl.ID)).ok(t, "saveEndpoint", &ep)
	wantEp := pyEndpoint{ID: ep.ID, Name: "echo", TemplateID: tpl.ID, GpuIds: "AMPERE_16", Locations: "BERTH-LOCAL",
		IdleTimeout: 5, ScalerType: "QUEUE_DELAY", ScalerValue: 4, WorkersMin: 0, WorkersMax: 3, GpuCount: 1, FlashBootType: "OFF"}
	if len(ep.ID) != 14 || !reflect.DeepEqual(ep, wantEp) {
		t.Errorf("saveEndpoint:\n got %+v\nwant %+v", ep, wantEp)
	}
	var v1e store.Endpoint
	e.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &v1e)
	if !reflect.DeepEqual(v1e.GPUTypeIDs, []string{"AMPERE_16"}) || v1e.TemplateID != tpl.ID || v1e.WorkersMax != 3 || v1e.Version != 1 {
		t.Errorf("/v1 endpoint: %+v", v1e)
	}
	// The job API knows it at once.
	e.rest("GET", "/v2/"+ep.ID+"/health", nil, 200, nil)
	// REST v2 shows the same records.
	var v2t struct {
		ID, Name, Image string
		Serverless      bool
		Env             map[string]string
	}
	e.rest("GET", "/v2/templates/"+tpl.ID, nil, 200, &v2t)
	if v2t.Name != "echo-tpl" || v2t.Image != "berth/echo:1" || !v2t.Serverless || v2t.Env["GREETING"] != "hello" {
		t.Errorf("/v2/templates: %+v", v2t)
	}
	var v2e struct{ ID, Name, Image, Type string }
	e.rest("GET", "/v2/serverless/"+ep.ID, nil, 200, &v2e)
	if v2e.ID != ep.ID || v2e.Name != "echo" || v2e.Image != "berth/echo:1" {
		t.Errorf("/v2/serverless: %+v", v2e)
	}

	// Every option create_endpoint has, with a network volume.
	var vol struct{ ID string }
	e.rest("POST", "/v1/networkvolumes", map[string]any{"name": "models", "size": 15, "dataCenterId": "EU-RO-1"}, 200, &vol)
	var ep2 pyEndpoint
	e.python(fixture(t, "runpod-python/create_endpoint_flashboot.graphql", "name", "fast", "templateId", tpl.ID, "volumeId", vol.ID)).ok(t, "saveEndpoint", &ep2)
	wantEp2 := pyEndpoint{ID: ep2.ID, Name: "fast", TemplateID: tpl.ID, GpuIds: "ADA_24,-NVIDIA L4", NetworkVolumeID: &vol.ID, Locations: "EU-RO-1",
		IdleTimeout: 30, ScalerType: "REQUEST_COUNT", ScalerValue: 2, WorkersMin: 0, WorkersMax: 2, AllowedCudaVersions: "12.4,12.5", GpuCount: 2, FlashBootType: "FLASHBOOT"}
	if !reflect.DeepEqual(ep2, wantEp2) {
		t.Errorf("saveEndpoint with every option:\n got %+v\nwant %+v", ep2, wantEp2)
	}
	e.rest("GET", "/v1/endpoints/"+ep2.ID, nil, 200, &v1e)
	if !v1e.Flashboot || v1e.NetworkVolumeID != vol.ID || !reflect.DeepEqual(v1e.GPUTypeIDs, []string{"ADA_24", "-NVIDIA L4"}) ||
		!reflect.DeepEqual(v1e.AllowedCudaVersions, []string{"12.4", "12.5"}) {
		t.Errorf("/v1 endpoint with every option: %+v", v1e)
	}

	// runpod.get_endpoints()
	var my struct {
		Endpoints []struct {
			AiKey          *string
			GpuIds, ID     string
			IdleTimeout    int
			Name           string
			Type, UserID   string
			Version        int
			WorkersStandby *int
			Env            []envKV
			CreatedAt      string
			NetworkVolume  *struct{ ID, DataCenterID string }
		}
	}
	e.python(fixture(t, "runpod-python/get_endpoints.graphql")).ok(t, "myself", &my)
	if len(my.Endpoints) != 2 || my.Endpoints[0].ID != ep.ID || my.Endpoints[1].ID != ep2.ID {
		t.Fatalf("get_endpoints: %+v", my)
	}
	got := my.Endpoints[1]
	if got.Type != "QUEUE" || got.UserID != "berth" || got.Version != 1 || got.Env == nil || got.CreatedAt == "" ||
		got.NetworkVolume == nil || got.NetworkVolume.ID != vol.ID || got.NetworkVolume.DataCenterID != "EU-RO-1" {
		t.Errorf("get_endpoints entry: %+v", got)
	}
	if my.Endpoints[0].NetworkVolume != nil {
		t.Errorf("endpoint without a volume shows %+v", my.Endpoints[0].NetworkVolume)
	}

	// runpod.update_endpoint_template(endpoint_id, template_id): a new
	// template rolls the workers (version 2).
	tpl2 := createTemplate(t, e, "echo-tpl-2", "berth/echo:2", "")
	var upd struct{ ID, TemplateID string }
	e.python(fixture(t, "runpod-python/update_endpoint_template.graphql", "templateId", tpl2.ID, "endpointId", ep.ID)).ok(t, "updateEndpointTemplate", &upd)
	if upd.ID != ep.ID || upd.TemplateID != tpl2.ID {
		t.Errorf("updateEndpointTemplate: %+v", upd)
	}
	e.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &v1e)
	if v1e.TemplateID != tpl2.ID || v1e.Version != 2 {
		t.Errorf("after updateEndpointTemplate: template %s version %d", v1e.TemplateID, v1e.Version)
	}
}

// A refused mutation answers errors[0].message naming the field, data
// null, and stores nothing.
func TestPythonRefusalsStoreNothing(t *testing.T) {
	e := newEnv(t)
	tpl := createTemplate(t, e, "t", "alpine:3", "")

	cases := []struct {
		name, doc, field string
		words            []string
	}{
		{"unknown template", fixture(t, "runpod-python/create_endpoint.graphql", "name", "x", "templateId", "zzzzzzzzzz"), "saveEndpoint", []string{"templateId", "zzzzzzzzzz"}},
		{"bad scaler", strings.Replace(fixture(t, "runpod-python/create_endpoint.graphql", "name", "x", "templateId", tpl.ID), `"QUEUE_DELAY"`, `"FASTEST"`, 1), "saveEndpoint", []string{"scalerType"}},
		{"workersMin over max", strings.Replace(fixture(t, "runpod-python/create_endpoint.graphql", "name", "x", "templateId", tpl.ID), "workersMin: 0", "workersMin: 5", 1), "saveEndpoint", []string{"workersMin"}},
		{"bad gpu id", strings.Replace(fixture(t, "runpod-python/create_endpoint.graphql", "name", "x", "templateId", tpl.ID), `"AMPERE_16"`, `"AMPERE_16,NVIDIA\u0001X"`, 1), "saveEndpoint", []string{"gpuIds"}},
		{"bad location", strings.Replace(fixture(t, "runpod-python/create_endpoint.graphql", "name", "x", "templateId", tpl.ID), `locations: ""`, `locations: "eu-ro-1"`, 1), "saveEndpoint", []string{"locations", "eu-ro-1"}},
		{"unknown volume", strings.Replace(fixture(t, "runpod-python/create_endpoint.graphql", "name", "x", "templateId", tpl.ID), `networkVolumeId: ""`, `networkVolumeId: "nosuchvol0"`, 1), "saveEndpoint", []string{"networkVolumeId"}},
		{"duplicate template name", fixture(t, "runpod-python/create_template.graphql", "name", "t", "image", "alpine:3", "dockerArgs", ""), "saveTemplate", []string{"already exists"}},
		{"bad ports", strings.Replace(fixture(t, "runpod-python/create_template.graphql", "name", "p", "image", "alpine:3", "dockerArgs", ""), `ports: ""`, `ports: "8888/udp"`, 1), "saveTemplate", []string{"ports", "8888/udp"}},
		{"unclosed quote", fixture(t, "runpod-python/create_template.graphql", "name", "q", "image", "alpine:3", "dockerArgs", `run \"x`), "saveTemplate", []string{"dockerArgs"}},
		{"empty image", fixture(t, "runpod-python/create_template.graphql", "name", "q", "image", "", "dockerArgs", ""), "saveTemplate", []string{"imageName"}},
		{"model reference", `mutation { saveEndpoint(input: {name: "m", templateId: "` + tpl.ID + `", modelReferences: ["hf/llama"]}) { id } }`, "saveEndpoint", []string{"modelReferences[0]", "not a Hugging Face model reference"}},
		{"hub", `mutation { saveEndpoint(input: {name: "m", hubReleaseId: "rel1"}) { id } }`, "saveEndpoint", []string{"hubReleaseId", "Hub"}},
		{"inline template, bad endpoint", `mutation { saveEndpoint(input: {name: "m", idleTimeout: 0, template: {name: "inline", imageName: "alpine:3"}}) { id } }`, "saveEndpoint", []string{"idleTimeout"}},
		{"inline template, unknown volume", `mutation { saveEndpoint(input: {name: "m", networkVolumeId: "nosuchvol0", template: {name: "inline", imageName: "alpine:3"}}) { id } }`, "saveEndpoint", []string{"networkVolumeId"}},
		{"delete missing registry auth", fixture(t, "runpod-python/delete_registry_auth.graphql", "id", "cnosuch"), "deleteRegistryAuth", []string{"not found"}},
		{"registry auth without password", `mutation { saveRegistryAuth(input: {name: "n", username: "u", password: ""}) { id } }`, "saveRegistryAuth", []string{"password"}},
		{"spot bid", `mutation { podRentInterruptable(input: {bidPerGpu: 0.2, gpuTypeId: "NVIDIA A40"}) { id } }`, "podRentInterruptable", []string{"spot"}},
		{"spot resume", `mutation { podBidResume(input: {podId: "x", bidPerGpu: 0.2}) { id } }`, "podBidResume", []string{"spot"}},
		{"unknown endpoint", `mutation { deleteEndpoint(id: "nosuchendpoint") }`, "deleteEndpoint", []string{"not found"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.python(c.doc).refused(t, c.field, c.words...)
		})
	}
	// RunPod operations Berth cannot offer say why, with one error each:
	// the Hub and the model repository (runpodctl's hub and model
	// commands, declared in the schema and refused by their resolvers),
	// secrets (left out of the schema).
	for _, c := range []struct {
		doc         string
		vars        J
		field, word string
	}{
		{`query myModels { myModels { id name } }`, nil, "myModels", "model repositories"},
		{`query myModel($owner: String!, $name: String!) { myModel(owner: $owner, name: $name) { id versions { uuid metadata } } }`, J{"owner": "me", "name": "m"}, "myModel", "model repositories"},
		{`mutation addModelToRepo($input: AddModelToRepoInput!) { addModelToRepo(input: $input) { success } }`, J{"input": J{"name": "m", "metadata": J{"a": 1}}}, "addModelToRepo", "model repositories"},
		{`mutation removeModelFromRepo($input: RemoveModelFromRepoInput!) { removeModelFromRepo(input: $input) { success } }`, J{"input": J{"owner": "me", "name": "m"}}, "removeModelFromRepo", "model repositories"},
		{`mutation createModelRepoUpload($input: CreateModelRepoUploadInput!) { createModelRepoUpload(input: $input) { success } }`, J{"input": J{"fileName": "f", "fileSizeBytes": "1"}}, "createModelRepoUpload", "model repositories"},
		{`mutation completeModelRepoUpload($input: CompleteModelRepoUploadInput!) { completeModelRepoUpload(input: $input) { status } }`, J{"input": J{"sessionId": "s"}}, "completeModelRepoUpload", "model repositories"},
		{`mutation updateModelVersionStatus($hash: ID, $status: ModelVersionStatus!) { updateModelVersionStatus(hash: $hash, status: $status) { success } }`, J{"hash": "h", "status": "READY"}, "updateModelVersionStatus", "model repositories"},
		{`query Listings($input: ListingsInput!) { listings(input: $input) { id title } }`, J{"input": J{"searchQuery": "vllm", "limit": 5}}, "listings", "Hub"},
		{`query GetListing($id: String!) { listing(id: $id) { id listedRelease { build { imageName } } } }`, J{"id": "x"}, "listing", "Hub"},
		{`query GetListingFromRepo($o: String!, $n: String!) { listingFromRepo(repoOwner: $o, repoName: $n) { id } }`, J{"o": "a", "n": "b"}, "listingFromRepo", "Hub"},
		{`mutation { secretCreate(input: {name: "n", value: "v"}) { id } }`, nil, "secretCreate", "secrets"},
	} {
		doc, words := c.doc, []string{c.field, c.word}
		r := e.ctl(doc, c.vars)
		if len(r.Errors) != 1 {
			t.Errorf("%s: want one error, got %+v", doc, r.Errors)
			continue
		}
		var said bool
		for _, er := range r.Errors {
			if er.Extensions["code"] == "UNSUPPORTED" && strings.Contains(er.Message, words[0]) && strings.Contains(er.Message, words[1]) {
				said = true
			}
		}
		if !said {
			t.Errorf("%s: errors %+v do not say why", doc, r.Errors)
		}
	}
	// Any other unknown operation keeps the library's message.
	if r := e.python(`query { cpuClusters { id } }`); len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, `Cannot query field "cpuClusters"`) {
		t.Errorf("unknown field: %+v", r.Errors)
	}
	for bucket, want := range map[string]int{store.Templates: 1, store.Endpoints: 0, store.RegistryAuths: 0, store.Pods: 0} {
		if n := e.count(bucket); n != want {
			t.Errorf("%s holds %d records after refusals, want %d", bucket, n, want)
		}
	}
}

func TestPythonRegistryAuthAndUser(t *testing.T) {
	e := newEnv(t)
	var a struct{ ID, Name string }
	e.python(fixture(t, "runpod-python/save_registry_auth.graphql", "name", "hub", "username", "me", "password", "s3cret")).ok(t, "saveRegistryAuth", &a)
	if !strings.HasPrefix(a.ID, "c") || len(a.ID) != 25 || a.Name != "hub" {
		t.Errorf("saveRegistryAuth: %+v", a)
	}
	var upd struct{ ID, Name string }
	e.python(fixture(t, "runpod-python/update_registry_auth.graphql", "id", a.ID, "username", "me2", "password", "n3w")).ok(t, "updateRegistryAuth", &upd)
	if upd != a {
		t.Errorf("updateRegistryAuth: %+v", upd)
	}
	if user, pass, err := store.RegistryCredentials(e.db, a.ID); err != nil || user != "me2" || pass != "n3w" {
		t.Errorf("credentials after update: %q %q %v", user, pass, err)
	}
	// A template pulling with it does not block the delete (one rule with
	// REST v2: only a pod does); the template loses the reference.
	var tpl struct {
		ID                      string
		ContainerRegistryAuthID string
	}
	e.rest("POST", "/v1/templates", map[string]any{"name": "private", "imageName": "me/private:1", "containerRegistryAuthId": a.ID}, 200, &tpl)
	var deleted bool
	e.python(fixture(t, "runpod-python/delete_registry_auth.graphql", "id", a.ID)).ok(t, "deleteRegistryAuth", &deleted)
	e.rest("GET", "/v1/containerregistryauth/"+a.ID, nil, 404, nil)
	tpl.ContainerRegistryAuthID = ""
	e.rest("GET", "/v1/templates/"+tpl.ID, nil, 200, &tpl)
	if tpl.ContainerRegistryAuthID != "" {
		t.Errorf("the template still names the deleted auth: %+v", tpl)
	}

	// runpod.get_user() and update_user_settings(pubkey): the SDK escapes
	// newlines as \n inside the literal.
	var vol struct{ ID string }
	e.rest("POST", "/v1/networkvolumes", map[string]any{"name": "data", "size": 17, "dataCenterId": "BERTH-LOCAL"}, 200, &vol)
	keys := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ1 me@laptop\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ2 me@desk"
	var u struct {
		ID     string
		PubKey string
	}
	e.python(fixture(t, "runpod-python/update_user_settings.graphql", "pubKey", strings.ReplaceAll(keys, "\n", `\n`))).ok(t, "updateUserSettings", &u)
	if u.ID != "berth" || u.PubKey != keys {
		t.Errorf("updateUserSettings: %+v", u)
	}
	var me struct {
		ID, PubKey     string
		NetworkVolumes []struct {
			ID, Name, DataCenterID string
			Size                   int
		}
	}
	e.python(fixture(t, "runpod-python/get_user.graphql")).ok(t, "myself", &me)
	if me.PubKey != keys || len(me.NetworkVolumes) != 1 || me.NetworkVolumes[0].ID != vol.ID || me.NetworkVolumes[0].Size != 17 ||
		me.NetworkVolumes[0].Name != "data" || me.NetworkVolumes[0].DataCenterID != "BERTH-LOCAL" {
		t.Errorf("get_user: %+v", me)
	}
}

func TestPythonGPUs(t *testing.T) {
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA GeForce RTX 4090", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
		{Index: 2, UUID: "GPU-c", Name: "Prototype Board X", MemoryMiB: 49152},
	}
	e := newEnv(t, withGPUs(devs...), withPrices(t, mgmt.Prices{GPUHourly: map[string]float64{"NVIDIA GeForce RTX 4090": 0.69}}))
	e.hold("worker-1", "GPU-a")

	// runpod.get_gpus(): the catalogue, this host's boards included.
	var all []struct {
		ID, DisplayName string
		MemoryInGb      int
	}
	e.python(fixture(t, "runpod-python/get_gpus.graphql")).ok(t, "gpuTypes", &all)
	byID := map[string]int{}
	for _, g := range all {
		byID[g.ID] = g.MemoryInGb
	}
	if len(all) < len(gpu.Models) || byID["NVIDIA GeForce RTX 4090"] != 24 || byID["NVIDIA Prototype Board X"] != 48 {
		t.Errorf("get_gpus: %d types, 4090 %d GB, local board %d GB", len(all), byID["NVIDIA GeForce RTX 4090"], byID["NVIDIA Prototype Board X"])
	}

	// runpod.get_gpu(id, quantity): prices from prices.json, counts from
	// this host.
	type lowest struct{ MinimumBidPrice, UninterruptablePrice *float64 }
	type gpuType struct {
		MaxGpuCount                         int
		ID, DisplayName, Manufacturer       string
		MemoryInGb                          int
		CudaCores                           *int
		SecureCloud, CommunityCloud         bool
		SecurePrice, CommunityPrice         *float64
		OneMonthPrice, ThreeMonthPrice      *float64
		OneWeekPrice                        *float64
		CommunitySpotPrice, SecureSpotPrice *float64
		LowestPrice                         lowest
	}
	var one []gpuType
	e.python(fixture(t, "runpod-python/get_gpu.graphql", "gpuId", "NVIDIA GeForce RTX 4090", "gpuCount", "2")).ok(t, "gpuTypes", &one)
	want := gpuType{MaxGpuCount: 2, ID: "NVIDIA GeForce RTX 4090", DisplayName: "RTX 4090", Manufacturer: "Nvidia", MemoryInGb: 24,
		SecureCloud: true, SecurePrice: ptr(0.69), LowestPrice: lowest{UninterruptablePrice: ptr(0.69)}}
	if len(one) != 1 || !reflect.DeepEqual(one[0], want) {
		t.Errorf("get_gpu 4090 x2:\n got %+v\nwant %+v", one, want)
	}
	// Stock: one of the two boards is held by a worker.
	var stock []struct {
		LowestPrice struct {
			StockStatus           *string
			MaxUnreservedGpuCount int
			AvailableGpuCounts    []int
		}
	}
	for n, want := range map[string]string{"1": "High", "2": "Low"} {
		e.python(`query { gpuTypes(input: {id: "NVIDIA GeForce RTX 4090"}) { lowestPrice(input: {gpuCount: `+n+`}) { stockStatus maxUnreservedGpuCount availableGpuCounts } } }`).ok(t, "gpuTypes", &stock)
		if lp := stock[0].LowestPrice; lp.StockStatus == nil || *lp.StockStatus != want || lp.MaxUnreservedGpuCount != 1 || !reflect.DeepEqual(lp.AvailableGpuCounts, []int{1, 2}) {
			t.Errorf("4090 x%s: %+v, want stock %s", n, lp, want)
		}
	}
	e.python(fixture(t, "runpod-python/get_gpu.graphql", "gpuId", "NVIDIA GeForce RTX 4090", "gpuCount", "3")).ok(t, "gpuTypes", &one)
	if len(one) != 1 || one[0].LowestPrice.UninterruptablePrice != nil {
		t.Errorf("get_gpu 4090 x3 (this host has 2): %+v", one)
	}
	e.python(fixture(t, "runpod-python/get_gpu.graphql", "gpuId", "NVIDIA A40", "gpuCount", "1")).ok(t, "gpuTypes", &one)
	if len(one) != 1 || one[0].SecureCloud || one[0].MaxGpuCount != 0 || one[0].MemoryInGb != 48 || *one[0].SecurePrice != 0 {
		t.Errorf("get_gpu of a type this host lacks: %+v", one)
	}
	// runpod-python raises ValueError on an empty list.
	e.python(fixture(t, "runpod-python/get_gpu.graphql", "gpuId", "NVIDIA Imaginary 9000", "gpuCount", "1")).ok(t, "gpuTypes", &one)
	if len(one) != 0 {
		t.Errorf("get_gpu of an unknown type: %+v", one)
	}
	r := e.python(fixture(t, "runpod-python/get_gpu.graphql", "gpuId", "NVIDIA A40", "gpuCount", "0"))
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0].Message, "gpuCount") || r.Errors[0].Extensions["field"] != "gpuCount" {
		t.Errorf("lowestPrice with gpuCount 0: %+v", r.Errors)
	}
}

// Auth and request errors in the GraphQL shape.
func TestAuthAndRequestErrors(t *testing.T) {
	e := newEnv(t)
	doc := fixture(t, "runpod-python/get_user.graphql")
	for _, auth := range []string{"", "Bearer wrong", "wrong"} {
		r := e.post(auth, map[string]any{"query": doc})
		if r.Code != http.StatusUnauthorized || len(r.Errors) != 1 || r.Errors[0].Message == "" {
			t.Errorf("key %q: %d %+v", auth, r.Code, r.Errors)
		}
	}
	// The bare key works as Bearer does.
	var me struct{ ID string }
	e.post(testKey, map[string]any{"query": doc}).ok(t, "myself", &me)

	for _, c := range []struct {
		body any
		code int
		says string
	}{
		{"not an object", 400, "JSON object"},
		{map[string]any{"query": "query { myself { id } }", "pad": strings.Repeat("x", 1<<20)}, 413, "bytes"},
		{map[string]any{"query": ""}, 400, "query is required"},
		{map[string]any{"query": "query { myself { id "}, 200, "syntax"},
		{map[string]any{"query": "query { myself { id balance } }"}, 200, "balance"},
		{map[string]any{"query": "mutation { saveTemplate(input: {name: \"x\", imageName: \"y\", colour: \"red\"}) { id } }"}, 200, "colour"},
		{map[string]any{"query": "query A { myself { id } } query B { gpuTypes { id } }"}, 200, "operation"},
		{map[string]any{"query": "query A { myself { id } } query B { gpuTypes { id } }", "operationName": "C"}, 200, "C"},
	} {
		r := e.post("Bearer "+testKey, c.body)
		if r.Code != c.code || len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, c.says) {
			t.Errorf("%v: %d %+v, want %d saying %q", c.body, r.Code, r.Errors, c.code, c.says)
		}
		if string(r.Raw["data"]) != "null" {
			t.Errorf("%v: data %s, want null", c.body, r.Raw["data"])
		}
	}
	// operationName picks one of several operations.
	r := e.post("Bearer "+testKey, map[string]any{"query": "query A { myself { id } } query B { serverlessGpuPools { id } }", "operationName": "B"})
	var pools []struct{ ID string }
	r.ok(t, "serverlessGpuPools", &pools)
	if _, ran := r.Data["myself"]; ran || len(pools) != len(gpu.Pools) {
		t.Errorf("operationName B: %v", r.Data)
	}
	// GET is not served.
	res, err := http.Get(e.base + "/graphql")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]json.RawMessage
	json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || body["errors"] == nil {
		t.Errorf("GET /graphql: %d %v", res.StatusCode, body)
	}
}

func ptr[T any](v T) *T { return &v }

// Concurrent create_template calls with one name: exactly one template.
func TestConcurrentSavesOneName(t *testing.T) {
	e := newEnv(t)
	doc := fixture(t, "runpod-python/create_template.graphql", "name", "race", "image", "alpine:3", "dockerArgs", "")
	const n = 8
	errs := make(chan int, n)
	for range n {
		go func() {
			b, _ := json.Marshal(map[string]string{"query": doc})
			req, _ := http.NewRequest(http.MethodPost, e.base+"/graphql", bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+testKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- -1
				return
			}
			var r struct{ Errors []struct{ Message string } }
			json.NewDecoder(res.Body).Decode(&r)
			res.Body.Close()
			errs <- len(r.Errors)
		}()
	}
	failed := 0
	for range n {
		switch k := <-errs; {
		case k < 0:
			t.Fatal("request failed")
		case k > 0:
			failed++
		}
	}
	if failed != n-1 || e.count(store.Templates) != 1 {
		t.Errorf("%d of %d refused, %d templates stored; want %d refused, 1 stored", failed, n, e.count(store.Templates), n-1)
	}
}

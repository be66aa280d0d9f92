package graphqlapi_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// The documents runpodctl sends (testdata/runpodctl), with the variables
// objects it builds: {"query", "variables"}, Bearer key. They are runpodctl
// 2e2df89's (v2.0.0-beta.1): testdata/clients.json records it and the
// source file of each, and TestFixturesMatchClients finds each verbatim
// there in ../shared/thirdparty.

type J = map[string]any

type ctlEndpoint struct {
	ID, Name, TemplateID, GpuIds string
	InstanceIds                  []string
	ComputeType                  string
	NetworkVolumeID              *string
	NetworkVolumeIds             []struct{ NetworkVolumeID, DataCenterID string }
	Locations                    string
	IdleTimeout                  int
	ScalerType                   string
	ScalerValue                  int
	WorkersMin, WorkersMax       int
	GpuCount                     int
	MinCudaVersion               *string
	ExecutionTimeoutMs           int
	FlashBootType                string
	ModelReferences              []string
}

func TestRunpodctlEndpoints(t *testing.T) {
	e := newEnv(t)
	tpl := createTemplate(t, e, "worker", "me/worker:1", "")
	var v1, v2 struct{ ID string }
	e.rest("POST", "/v1/networkvolumes", J{"name": "a", "size": 15, "dataCenterId": "EU-RO-1"}, 200, &v1)
	e.rest("POST", "/v1/networkvolumes", J{"name": "b", "size": 15, "dataCenterId": "US-TX-3"}, 200, &v2)

	// runpodctl serverless create --template-id … --gpu-id ADA_24 (the
	// EndpointCreateGQLInput it marshals, omitempty fields left out).
	var ep ctlEndpoint
	e.ctl(fixture(t, "runpodctl/create_endpoint.graphql"), J{"input": J{
		"name": "ctl-ep", "templateId": tpl.ID, "gpuIds": "ADA_24", "gpuCount": 1, "workersMin": 1, "workersMax": 4,
		"networkVolumeIds": []J{{"networkVolumeId": v1.ID}, {"networkVolumeId": v2.ID}},
		"idleTimeout":      60, "scalerType": "REQUEST_COUNT", "scalerValue": 3, "executionTimeoutMs": 120000,
		"minCudaVersion": "12.4", "flashBootType": "FLASHBOOT",
	}}).ok(t, "saveEndpoint", &ep)
	if ep.Name != "ctl-ep" || ep.GpuIds != "ADA_24" || ep.ComputeType != "GPU" || ep.WorkersMin != 1 || ep.WorkersMax != 4 ||
		ep.IdleTimeout != 60 || ep.ScalerType != "REQUEST_COUNT" || ep.ScalerValue != 3 || ep.ExecutionTimeoutMs != 120000 ||
		ep.MinCudaVersion == nil || *ep.MinCudaVersion != "12.4" || ep.FlashBootType != "FLASHBOOT" || ep.NetworkVolumeID != nil ||
		len(ep.InstanceIds) != 0 || len(ep.ModelReferences) != 0 || len(ep.NetworkVolumeIds) != 2 ||
		ep.NetworkVolumeIds[0].NetworkVolumeID != v1.ID || ep.NetworkVolumeIds[0].DataCenterID != "EU-RO-1" || ep.NetworkVolumeIds[1].DataCenterID != "US-TX-3" {
		t.Errorf("saveEndpoint (runpodctl): %+v", ep)
	}
	var rec store.Endpoint
	e.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &rec)
	if !reflect.DeepEqual(rec.NetworkVolumeIDs, []string{v1.ID, v2.ID}) || rec.ExecutionTimeoutMs != 120000 || !rec.Flashboot {
		t.Errorf("/v1 endpoint: %+v", rec)
	}

	// A CPU endpoint: instanceIds.
	var cpu ctlEndpoint
	e.ctl(fixture(t, "runpodctl/create_endpoint.graphql"), J{"input": J{"name": "cpu-ep", "templateId": tpl.ID, "instanceIds": []string{"cpu3c-2-4"}, "workersMax": 1}}).ok(t, "saveEndpoint", &cpu)
	if cpu.ComputeType != "CPU" || !reflect.DeepEqual(cpu.InstanceIds, []string{"cpu3c-2-4"}) {
		t.Errorf("CPU endpoint: %+v", cpu)
	}

	// A load-balancing endpoint; the type cannot change afterwards.
	var lb struct{ ID, Type string }
	e.ctl(`mutation($input: EndpointInput!) { saveEndpoint(input: $input) { id type } }`, J{"input": J{"name": "lb", "templateId": tpl.ID, "type": "LOAD_BALANCER"}}).ok(t, "saveEndpoint", &lb)
	if lb.Type != "LOAD_BALANCER" {
		t.Errorf("LB endpoint: %+v", lb)
	}
	e.ctl(`mutation($input: EndpointInput!) { saveEndpoint(input: $input) { id } }`, J{"input": J{"id": lb.ID, "type": "QUEUE"}}).refused(t, "saveEndpoint", "type")
	e.rest("DELETE", "/v1/endpoints/"+lb.ID, nil, 204, nil)

	// An inline template (runpodctl serverless create --image …).
	var inl ctlEndpoint
	e.ctl(fixture(t, "runpodctl/create_endpoint.graphql"), J{"input": J{"name": "inline", "gpuIds": "AMPERE_24",
		"template": J{"name": "inline-tpl", "imageName": "me/inline:2", "containerDiskInGb": 5, "dockerArgs": "", "env": []J{{"key": "K", "value": "V"}}}}}).ok(t, "saveEndpoint", &inl)
	var itpl store.Template
	e.rest("GET", "/v1/templates/"+inl.TemplateID, nil, 200, &itpl)
	if itpl.Name != "inline-tpl" || itpl.ImageName != "me/inline:2" || !itpl.IsServerless || itpl.Env["K"] != "V" || itpl.ContainerDiskInGb != 5 {
		t.Errorf("inline template: %+v", itpl)
	}

	// runpodctl serverless update --template-id (variables, nullable input type).
	tpl2 := createTemplate(t, e, "worker-2", "me/worker:2", "")
	var upd struct{ ID, TemplateID string }
	e.ctl(fixture(t, "runpodctl/update_endpoint_template.graphql"), J{"input": J{"endpointId": ep.ID, "templateId": tpl2.ID}}).ok(t, "updateEndpointTemplate", &upd)
	if upd.TemplateID != tpl2.ID {
		t.Errorf("updateEndpointTemplate: %+v", upd)
	}

	// UpdateEndpointModels (serverless update --model-reference,
	// --clear-models): saveEndpoint with id round-trips the config with
	// the new modelReferences, read back; a malformed one is refused
	// naming the field and changes nothing; [] clears them.
	round := J{"id": ep.ID, "name": "renamed", "templateId": tpl2.ID, "gpuIds": "ADA_24", "gpuCount": 1, "instanceIds": nil,
		"workersMin": 0, "workersMax": 4, "locations": "", "networkVolumeId": "", "networkVolumeIds": []J{{"networkVolumeId": v1.ID}},
		"idleTimeout": 60, "scalerType": "REQUEST_COUNT", "scalerValue": 3, "executionTimeoutMs": 120000, "minCudaVersion": "12.4",
		"flashBootType": "FLASHBOOT", "modelReferences": []string{}}
	var same ctlEndpoint
	e.ctl(fixture(t, "runpodctl/update_endpoint_models.graphql"), J{"input": round}).ok(t, "saveEndpoint", &same)
	if same.ID != ep.ID || same.Name != "renamed" || same.WorkersMin != 0 || len(same.NetworkVolumeIds) != 1 {
		t.Errorf("saveEndpoint with id: %+v", same)
	}
	models := []string{"https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct:main", "https://huggingface.co/acme/tiny"}
	round["modelReferences"] = models
	e.ctl(fixture(t, "runpodctl/update_endpoint_models.graphql"), J{"input": round}).ok(t, "saveEndpoint", &same)
	if !slices.Equal(same.ModelReferences, models) {
		t.Errorf("saveEndpoint modelReferences: %q, want %q", same.ModelReferences, models)
	}
	round["name"] = "renamed-again"
	round["modelReferences"] = []string{"meta-llama/Llama-3-8B"}
	e.ctl(fixture(t, "runpodctl/update_endpoint_models.graphql"), J{"input": round}).refused(t, "saveEndpoint", "modelReferences[0]", "https://huggingface.co/ORG/NAME")
	round["modelReferences"] = []string{"https://huggingface.co/acme/tiny\n"}
	e.ctl(fixture(t, "runpodctl/update_endpoint_models.graphql"), J{"input": round}).refused(t, "saveEndpoint", "modelReferences[0]", "control character")
	e.rest("GET", "/v1/endpoints/"+ep.ID, nil, 200, &rec)
	if rec.Name != "renamed" || !slices.Equal(rec.ModelReferences, models) {
		t.Errorf("a refused update changed the endpoint: %+v", rec)
	}
	round["name"] = "renamed"
	round["modelReferences"] = []string{}
	e.ctl(fixture(t, "runpodctl/update_endpoint_models.graphql"), J{"input": round}).ok(t, "saveEndpoint", &same)
	if len(same.ModelReferences) != 0 {
		t.Errorf("--clear-models left %q", same.ModelReferences)
	}

	// Variables are checked against the schema like literals.
	e.ctl(fixture(t, "runpodctl/create_endpoint.graphql"), J{"input": J{"name": "x", "templateId": tpl.ID, "workersMax": "many"}}).refused(t, "saveEndpoint", "workersMax")
	e.ctl(fixture(t, "runpodctl/create_endpoint.graphql"), J{"input": J{"name": "x", "templateId": tpl.ID, "flashBootType": "TURBO"}}).refused(t, "saveEndpoint", "TURBO")
	e.ctl(fixture(t, "runpodctl/create_endpoint.graphql"), J{}).refused(t, "saveEndpoint", "input")
	if n := e.count(store.Endpoints); n != 3 {
		t.Errorf("%d endpoints, want 3", n)
	}
}

func TestRunpodctlTemplates(t *testing.T) {
	e := newEnv(t)
	var pub, priv struct{ ID string }
	e.rest("POST", "/v1/templates", J{"name": "public-comfy", "imageName": "me/comfy:1", "isPublic": true, "ports": "8188/http,22/tcp", "readme": "# hi"}, 200, &pub)
	e.rest("POST", "/v1/templates", J{"name": "mine", "imageName": "me/private:1", "isServerless": true}, 200, &priv)

	type found struct {
		ID, Name, ImageName              string
		IsServerless, IsPublic, IsRunpod bool
		Category                         string
		ContainerDiskInGb, VolumeInGb    int
		VolumeMountPath                  string
	}
	// runpodctl template search: official (isRunpod) first, then community.
	var official, community []found
	e.ctl(fixture(t, "runpodctl/search_templates.graphql"), J{"input": J{"isRunpod": true}}).ok(t, "podTemplates", &official)
	e.ctl(fixture(t, "runpodctl/search_templates.graphql"), J{"input": J{"isRunpod": false}}).ok(t, "podTemplates", &community)
	if len(official) != 0 || len(community) != 1 || community[0].ID != pub.ID || community[0].Category != "NVIDIA" || community[0].VolumeMountPath != "/workspace" {
		t.Errorf("search: official %+v, community %+v", official, community)
	}

	// runpodctl template get.
	type full struct {
		ID, Name, ImageName     string
		Ports                   string
		PortsConfig             []struct{ Port, Name string }
		Env                     []envKV
		ContainerRegistryAuthID *string
		Readme                  string
	}
	var got full
	e.ctl(fixture(t, "runpodctl/get_template.graphql"), J{"id": pub.ID}).ok(t, "podTemplate", &got)
	if got.Ports != "8188/http,22/tcp" || len(got.PortsConfig) != 0 || got.Readme != "# hi" || got.ContainerRegistryAuthID != nil {
		t.Errorf("podTemplate: %+v", got)
	}
	e.ctl(fixture(t, "runpodctl/get_template.graphql"), J{"id": "zzzzzzzzzz"}).refused(t, "podTemplate", "not found")

	// runpodctl template update --port-labels: read the whole template
	// through myself.podTemplates, send it back with portsConfig.
	var my struct {
		PodTemplates []J
	}
	e.ctl(fixture(t, "runpodctl/template_save_state.graphql"), nil).ok(t, "myself", &my)
	if len(my.PodTemplates) != 2 {
		t.Fatalf("myself.podTemplates: %+v", my)
	}
	state := my.PodTemplates[0]
	input := J{"id": state["id"], "name": state["name"], "imageName": state["imageName"], "containerDiskInGb": state["containerDiskInGb"],
		"containerRegistryAuthId": state["containerRegistryAuthId"], "dockerArgs": state["dockerArgs"], "env": state["env"],
		"ports": state["ports"], "portsConfig": []J{{"port": "8188", "name": "ComfyUI"}, {"port": "22", "name": "SSH"}},
		"volumeInGb": state["volumeInGb"], "isPublic": state["isPublic"], "isServerless": state["isServerless"],
		"startJupyter": state["startJupyter"], "startSsh": state["startSsh"], "advancedStart": state["advancedStart"],
		"readme": state["readme"], "volumeMountPath": state["volumeMountPath"], "category": state["category"]}
	var saved struct{ ID string }
	e.ctl(fixture(t, "runpodctl/update_template_port_labels.graphql"), J{"input": input}).ok(t, "saveTemplate", &saved)
	e.ctl(fixture(t, "runpodctl/get_template.graphql"), J{"id": pub.ID}).ok(t, "podTemplate", &got)
	if saved.ID != pub.ID || !reflect.DeepEqual(got.PortsConfig, []struct{ Port, Name string }{{"8188", "ComfyUI"}, {"22", "SSH"}}) || got.Readme != "# hi" {
		t.Errorf("port labels: %+v", got)
	}
	// Labels and all survive a restart.
	e.restart()
	var again full
	e.ctl(fixture(t, "runpodctl/get_template.graphql"), J{"id": pub.ID}).ok(t, "podTemplate", &again)
	if !reflect.DeepEqual(again, got) {
		t.Errorf("podTemplate after a restart:\n got %+v\nwant %+v", again, got)
	}
	// A label for a port the template does not open is refused.
	input["portsConfig"] = []J{{"port": "9999", "name": "nope"}}
	e.ctl(fixture(t, "runpodctl/update_template_port_labels.graphql"), J{"input": input}).refused(t, "saveTemplate", "portsConfig", "9999")
	// Dropping a port drops its label.
	input["ports"], input["portsConfig"] = "8188/http", nil
	e.ctl(fixture(t, "runpodctl/update_template_port_labels.graphql"), J{"input": input}).ok(t, "saveTemplate", nil)
	e.ctl(fixture(t, "runpodctl/get_template.graphql"), J{"id": pub.ID}).ok(t, "podTemplate", &got)
	if !reflect.DeepEqual(got.PortsConfig, []struct{ Port, Name string }{{"8188", "ComfyUI"}}) {
		t.Errorf("labels after dropping port 22: %+v", got.PortsConfig)
	}
	// isServerless and category may change (one rule with REST v2, where
	// both are mutable).
	input["isServerless"] = true
	e.ctl(fixture(t, "runpodctl/update_template_port_labels.graphql"), J{"input": input}).ok(t, "saveTemplate", nil)
	input["category"] = "GPU"
	e.ctl(fixture(t, "runpodctl/update_template_port_labels.graphql"), J{"input": input}).refused(t, "saveTemplate", "category")

	// deleteTemplate by name.
	e.python(`mutation { deleteTemplate(templateName: "mine") }`).ok(t, "deleteTemplate", nil)
	e.rest("GET", "/v1/templates/"+priv.ID, nil, 404, nil)
	e.python(`mutation { deleteTemplate(templateName: "mine") }`).refused(t, "deleteTemplate", "not found")
}

func TestRunpodctlAccountAndCatalogue(t *testing.T) {
	devs := []gpu.Device{{Index: 0, UUID: "GPU-a", Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068}}
	e := newEnv(t, withFake(devs, "me/dev:1"),
		withPrices(t, mgmt.Prices{GPUHourly: map[string]float64{"NVIDIA A40": 0.4}, VCPUHourly: 0.02}))

	// runpodctl ssh add-key: read pubKey, write the joined keys back.
	var me struct{ ID, PubKey string }
	e.ctl(fixture(t, "runpodctl/ssh_keys.graphql"), nil).ok(t, "myself", &me)
	if me.ID != "berth" || me.PubKey != "" {
		t.Errorf("no keys yet: %+v", me)
	}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey1 me@laptop"
	e.ctl(fixture(t, "runpodctl/update_user_settings.graphql"), J{"input": J{"pubKey": key}}).ok(t, "updateUserSettings", nil)
	e.restart()
	e.ctl(fixture(t, "runpodctl/ssh_keys.graphql"), nil).ok(t, "myself", &me)
	if me.PubKey != key {
		t.Errorf("pubKey after an update and a restart: %q", me.PubKey)
	}
	// They are the account's SSH keys of REST v2 too.
	var v2keys struct{ Keys []string }
	e.rest("GET", "/v2/account/ssh-keys", nil, 200, &v2keys)
	if !reflect.DeepEqual(v2keys.Keys, []string{key}) {
		t.Errorf("/v2/account/ssh-keys: %+v", v2keys)
	}
	// runpodctl ssh add-key joins keys with a blank line; each must be a key.
	two := key + "\n\nssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ me@desk"
	e.ctl(fixture(t, "runpodctl/update_user_settings.graphql"), J{"input": J{"pubKey": two}}).ok(t, "updateUserSettings", nil)
	e.ctl(fixture(t, "runpodctl/ssh_keys.graphql"), nil).ok(t, "myself", &me)
	if me.PubKey != key+"\nssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ me@desk" {
		t.Errorf("two keys: %q", me.PubKey)
	}
	e.ctl(fixture(t, "runpodctl/update_user_settings.graphql"), J{"input": J{"pubKey": key + "\nnot a key"}}).refused(t, "updateUserSettings", "pubKey[1]")
	e.ctl(fixture(t, "runpodctl/update_user_settings.graphql"), J{"input": J{"pubKey": key}}).ok(t, "updateUserSettings", nil)

	// runpodctl gpu list: types, data-centre availability, pools.
	var types []struct {
		ID, DisplayName             string
		MemoryInGb                  int
		SecureCloud, CommunityCloud bool
	}
	e.ctl(fixture(t, "runpodctl/gpu_types.graphql"), nil).ok(t, "gpuTypes", &types)
	available := 0
	for _, g := range types {
		if g.SecureCloud || g.CommunityCloud {
			available++
			if g.ID != "NVIDIA A40" || g.MemoryInGb != 48 || g.CommunityCloud {
				t.Errorf("available type: %+v", g)
			}
		}
	}
	if available != 1 {
		t.Errorf("%d available types, want 1 (the A40)", available)
	}
	var dcs []struct {
		ID, Name, Location string
		GpuAvailability    []struct{ GpuTypeID, DisplayName, StockStatus string }
	}
	e.ctl(fixture(t, "runpodctl/data_centers.graphql"), nil).ok(t, "dataCenters", &dcs)
	if len(dcs) != 1 || dcs[0].ID != "BERTH-LOCAL" || len(dcs[0].GpuAvailability) != 1 ||
		dcs[0].GpuAvailability[0].GpuTypeID != "NVIDIA A40" || dcs[0].GpuAvailability[0].StockStatus != "High" {
		t.Errorf("dataCenters: %+v", dcs)
	}
	var pools []struct {
		ID         string
		GpuTypeIds []string
	}
	e.ctl(fixture(t, "runpodctl/serverless_gpu_pools.graphql"), nil).ok(t, "serverlessGpuPools", &pools)
	var ampere48 []string
	for _, p := range pools {
		if p.ID == "AMPERE_48" {
			ampere48 = p.GpuTypeIds
		}
	}
	if len(pools) != len(gpu.Pools) || !reflect.DeepEqual(ampere48, []string{"NVIDIA RTX A6000", "NVIDIA A40"}) {
		t.Errorf("serverlessGpuPools: %+v", pools)
	}

	// runpodctl pod create (podFindAndDeployOnDemand with variables);
	// startSsh puts the account's key (set above) in PUBLIC_KEY.
	type ctlPod struct {
		ID, Name, ImageName, DesiredStatus string
		CostPerHr                          float64
		ContainerDiskInGb, VolumeInGb      int
		VolumeMountPath                    string
		GpuCount, MemoryInGb, VcpuCount    int
		Ports                              string
		LastStatusChange                   string
		Env                                []string
		Machine                            struct{ GpuDisplayName, Location string }
	}
	var pod ctlPod
	e.ctl(fixture(t, "runpodctl/create_pod.graphql"), J{"input": J{"cloudType": "SECURE", "containerDiskInGb": 20, "gpuCount": 1,
		"gpuTypeId": "NVIDIA A40", "imageName": "me/dev:1", "name": "ctl-pod", "ports": "8888/http", "startSsh": true,
		"supportPublicIp": true, "volumeInGb": 30, "volumeMountPath": "/data", "env": []J{{"key": "HF_HOME", "value": "/data/hf"}}}}).ok(t, "podFindAndDeployOnDemand", &pod)
	if pod.Name != "ctl-pod" || pod.DesiredStatus != "RUNNING" || pod.ContainerDiskInGb != 20 || pod.VolumeInGb != 30 || pod.VolumeMountPath != "/data" ||
		pod.GpuCount != 1 || pod.VcpuCount != 2 || pod.MemoryInGb <= 0 || pod.Ports != "8888/http" || !reflect.DeepEqual(pod.Env, []string{"HF_HOME=/data/hf", "PUBLIC_KEY=" + key}) ||
		pod.Machine.GpuDisplayName != "A40" || !strings.HasPrefix(pod.Machine.Location, "local") || pod.CostPerHr != 0.44 {
		// The host's A40 at 0.4, and 2 vCPUs at 0.02.
		t.Errorf("podFindAndDeployOnDemand (runpodctl): %+v", pod)
	}

	// runpodctl user: the account, spending the running pod's rate.
	var user struct {
		ID                                                   string
		Email                                                *string
		ClientBalance                                        *float64
		CurrentSpendPerHr                                    float64
		SpendLimit                                           *float64
		NotifyPodsStale, NotifyPodsGeneral, NotifyLowBalance bool
	}
	e.ctl(fixture(t, "runpodctl/user.graphql"), nil).ok(t, "myself", &user)
	if user.ID != "berth" || user.Email != nil || user.ClientBalance != nil || user.CurrentSpendPerHr != 0.44 {
		t.Errorf("user: %+v", user)
	}

	// runpodctl ssh connect: pods with their mapped ports.
	var pods struct {
		Pods []struct {
			ID      string
			Runtime struct {
				Ports []struct {
					IP                      string
					PrivatePort, PublicPort int
					Type                    string
				}
			}
		}
	}
	e.ctl(fixture(t, "runpodctl/pods.graphql"), nil).ok(t, "myself", &pods)
	in, _ := e.fake.Pod(pod.ID)
	if len(pods.Pods) != 1 || len(pods.Pods[0].Runtime.Ports) != 1 || pods.Pods[0].Runtime.Ports[0].PublicPort != in.PublicPorts["8888/tcp"] {
		t.Errorf("pods: %+v, want 8888 as the backend published it (%v)", pods, in.PublicPorts)
	}

	// Network volumes.
	var vol struct{ ID string }
	e.rest("POST", "/v1/networkvolumes", J{"name": "v", "size": 19, "dataCenterId": "BERTH-LOCAL"}, 200, &vol)
	var nv struct {
		NetworkVolumes []struct {
			DataCenterID, ID, Name string
			Size                   int
		}
	}
	e.ctl(fixture(t, "runpodctl/network_volumes.graphql"), nil).ok(t, "myself", &nv)
	if len(nv.NetworkVolumes) != 1 || nv.NetworkVolumes[0].ID != vol.ID || nv.NetworkVolumes[0].Size != 19 {
		t.Errorf("network volumes: %+v", nv)
	}
}

package v1api_test

import (
	"testing"

	"berth/gpu"
	"berth/internal/apitest"
)

// TestRunPodV1Conformance drives every operation of RunPod's v1.json
// against Berth, successes and the errors users meet, through the
// validator built from that document.
func TestRunPodV1Conformance(t *testing.T) {
	a40 := gpu.Device{Index: 2, UUID: "GPU-A40", Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068}
	e := apitest.NewValidating(t, apitest.WithFake(append(apitest.PodGPUs, a40), "alpine:3"))
	c := e.Conformant(true)

	e.Must(200, "GET", "/v1/openapi.json", nil, nil)
	e.Must(200, "GET", "/v1/docs", nil, nil)

	auth := e.NewRegistryAuth("hub", "me", "pw")
	e.Must(200, "GET", "/v1/containerregistryauth", nil, nil)
	e.Must(200, "GET", "/v1/containerregistryauth/"+auth.ID, nil, nil)
	e.MustErr(404, "GET", "/v1/containerregistryauth/nosuchauth", nil, "not found")

	vol := e.NewVolume("data", 10)
	e.Must(200, "GET", "/v1/networkvolumes", nil, nil)
	e.Must(200, "GET", "/v1/networkvolumes/"+vol.ID, nil, nil)
	e.Must(200, "PATCH", "/v1/networkvolumes/"+vol.ID, J{"name": "data2"}, nil)
	e.Must(200, "POST", "/v1/networkvolumes/"+vol.ID+"/update", J{"size": 11}, nil)
	e.MustErr(404, "GET", "/v1/networkvolumes/nosuchvol", nil, "not found")
	e.MustErr(400, "POST", "/v1/networkvolumes", J{"name": "x", "size": 0, "dataCenterId": "EU-RO-1"}, "size")

	tpl := e.NewTemplate("t", "alpine:3", J{"containerRegistryAuthId": auth.ID})
	e.Must(200, "GET", "/v1/templates?includeEndpointBoundTemplates=true&includePublicTemplates=true&includeRunpodTemplates=true", nil, nil)
	e.Must(200, "GET", "/v1/templates/"+tpl.ID, nil, nil)
	e.Must(200, "PATCH", "/v1/templates/"+tpl.ID, J{"readme": "r"}, nil)
	e.Must(200, "POST", "/v1/templates/"+tpl.ID+"/update", J{"isPublic": true}, nil)
	e.MustErr(404, "GET", "/v1/templates/abcdefghij", nil, "not found")
	e.MustErr(400, "POST", "/v1/templates", J{"name": "no image"}, "imageName")

	ep := e.NewEndpoint(tpl.ID, J{"networkVolumeId": vol.ID, "gpuTypeIds": []string{"NVIDIA A40"}, "dataCenterIds": []string{"EU-RO-1"}})
	// Liberal ids (allow-listed): a GPU pool id, and no data centre given.
	pooled := e.NewEndpoint(tpl.ID, J{"name": "pooled", "gpuTypeIds": []string{"AMPERE_16", "ADA_24"}})
	e.Must(200, "GET", "/v1/endpoints?includeTemplate=true&includeWorkers=true", nil, nil)
	e.Must(200, "GET", "/v1/endpoints/"+ep.ID+"?includeTemplate=true&includeWorkers=true", nil, nil)
	e.Must(200, "PATCH", "/v1/endpoints/"+ep.ID, J{"workersMax": 2}, nil)
	e.Must(200, "POST", "/v1/endpoints/"+ep.ID+"/update", J{"idleTimeout": 9}, nil)
	e.MustErr(404, "GET", "/v1/endpoints/nosuchendpoint", nil, "not found")
	e.MustErr(400, "POST", "/v1/endpoints", J{"templateId": tpl.ID, "workersMin": 3, "workersMax": 1}, "workers")

	pod := e.NewPod(J{"templateId": tpl.ID, "networkVolumeId": vol.ID, "gpuTypeIds": []string{"NVIDIA A40"}, "dataCenterIds": []string{"US-TX-3"}})
	cpu := e.NewPod(J{"imageName": "alpine:3", "computeType": "CPU", "name": "cpu-pod"})
	e.Must(200, "GET", "/v1/pods?includeMachine=true&includeNetworkVolume=true&includeTemplate=true&includeSavingsPlans=true&includeWorkers=true", nil, nil)
	e.Must(200, "GET", "/v1/pods?computeType=CPU&name=cpu-pod", nil, nil)
	e.Must(200, "GET", "/v1/pods/"+pod.ID+"?includeMachine=true&includeNetworkVolume=true&includeTemplate=true&includeSavingsPlans=true", nil, nil)
	e.Must(200, "PATCH", "/v1/pods/"+pod.ID, J{"name": "p"}, nil)
	e.Must(200, "POST", "/v1/pods/"+pod.ID+"/update", J{"env": J{"X": "1"}}, nil)
	for _, a := range []string{"stop", "start", "restart", "reset"} {
		e.Must(200, "POST", "/v1/pods/"+pod.ID+"/"+a, nil, nil)
	}
	e.MustErr(404, "GET", "/v1/pods/nosuchpod", nil, "not found")
	e.MustErr(400, "POST", "/v1/pods", J{"name": "no image"}, "imageName")

	for _, p := range []string{"/v1/billing/pods?grouping=podId&bucketSize=hour", "/v1/billing/pods?podId=" + pod.ID,
		"/v1/billing/endpoints?bucketSize=day&grouping=endpointId", "/v1/billing/endpoints?endpointId=" + ep.ID,
		"/v1/billing/networkvolumes?bucketSize=week"} {
		e.Must(200, "GET", p, nil, nil)
	}

	e.Must(204, "DELETE", "/v1/pods/"+pod.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/pods/"+cpu.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/endpoints/"+ep.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/endpoints/"+pooled.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/templates/"+tpl.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/networkvolumes/"+vol.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/containerregistryauth/"+auth.ID, nil, nil)
	c.CheckCovered("v1")
}

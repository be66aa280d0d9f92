package v1api

import (
	"context"
	"net/http"
	goruntime "runtime"

	"github.com/gorilla/mux"

	"berth/mgmt"
	"berth/store"
)

// Pod views: GET /pods (with its filters and includeWorkers) and GET /pods/{podId}.

// podIncludes are the include flags of the pod routes.
var podIncludes = []string{"includeMachine", "includeNetworkVolume", "includeSavingsPlans", "includeTemplate", "includeWorkers"}

// machineView is a pod's machine: this host.
type machineView struct {
	DataCenterID    string `json:"dataCenterId"`
	Location        string `json:"location"`
	GPUTypeID       string `json:"gpuTypeId,omitempty"`
	GPUDisplayName  string `json:"gpuDisplayName,omitempty"`
	CPUCount        int    `json:"cpuCount"`
	SecureCloud     bool   `json:"secureCloud"`
	SupportPublicIP bool   `json:"supportPublicIp"`
}

// podView is a Pod as the API shows it.
type podView struct {
	store.Pod
	Image             string               `json:"image"`
	ConsumerUserID    string               `json:"consumerUserId"`
	CostPerHr         float64              `json:"costPerHr"`
	AdjustedCostPerHr float64              `json:"adjustedCostPerHr"`
	Machine           *machineView         `json:"machine,omitempty"`
	NetworkVolume     *store.NetworkVolume `json:"networkVolume,omitempty"`
	SavingsPlans      *[]struct{}          `json:"savingsPlans,omitempty"`
	Template          *store.Template      `json:"template,omitempty"`
}

// podRefs are the records the include flags add.
type podRefs struct {
	volumes   map[string]store.NetworkVolume
	templates map[string]store.Template
}

func (a *API) loadPodRefs(ctx context.Context) (podRefs, error) {
	sn, err := a.cfg.Mgmt.Snapshot(ctx)
	return podRefs{volumes: sn.Volumes, templates: sn.Templates}, err
}

func (a *API) viewPod(p store.Pod, flags map[string]bool, refs podRefs, prices mgmt.Prices) podView {
	v := podView{Pod: p, Image: p.ImageName, ConsumerUserID: "berth"}
	v.CostPerHr = prices.PodHourly(p)
	v.AdjustedCostPerHr = v.CostPerHr
	if flags["includeMachine"] {
		m := &machineView{DataCenterID: mgmt.PodDataCenter(p), Location: "local", CPUCount: goruntime.NumCPU(), SecureCloud: true, SupportPublicIP: true}
		if p.GPU != nil {
			m.GPUTypeID, m.GPUDisplayName = p.GPU.ID, p.GPU.DisplayName
		}
		v.Machine = m
	}
	if flags["includeNetworkVolume"] && p.NetworkVolumeID != "" {
		if nv, ok := refs.volumes[p.NetworkVolumeID]; ok {
			v.NetworkVolume = &nv
		}
	}
	if flags["includeSavingsPlans"] {
		v.SavingsPlans = &[]struct{}{}
	}
	if flags["includeTemplate"] && p.TemplateID != "" {
		if t, ok := refs.templates[p.TemplateID]; ok {
			v.Template = &t
		}
	}
	return v
}

// writePod answers one pod. flags nil means no includes.
func (a *API) writePod(w http.ResponseWriter, r *http.Request, code int, p store.Pod, flags map[string]bool) {
	var refs podRefs
	if flags["includeNetworkVolume"] || flags["includeTemplate"] {
		var err error
		if refs, err = a.loadPodRefs(r.Context()); err != nil {
			a.internal(w, r, err)
			return
		}
	}
	writeJSON(w, code, a.viewPod(p, flags, refs, a.cfg.Mgmt.PricesOrZero()))
}

func (a *API) getPod(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, podIncludes...)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.cfg.Mgmt.GetPod(r.Context(), mux.Vars(r)["podId"])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writePod(w, r, http.StatusOK, p, flags)
}

func parsePodFilter(r *http.Request) (mgmt.PodFilter, error) {
	q := r.URL.Query()
	f := mgmt.PodFilter{
		EndpointID: q.Get("endpointId"), ID: q.Get("id"), ImageName: q.Get("imageName"), Name: q.Get("name"),
		NetworkVolumeID: q.Get("networkVolumeId"), TemplateID: q.Get("templateId"),
		CPUFlavorIDs: queryList(r, "cpuFlavorId"), DataCenterIDs: queryList(r, "dataCenterId"), GPUTypeIDs: queryList(r, "gpuTypeId"),
	}
	var err error
	if f.ComputeType, err = queryEnum(r, "computeType", "", "GPU", "CPU"); err != nil {
		return f, err
	}
	f.DesiredStatus, err = queryEnum(r, "desiredStatus", "", store.PodRunning, store.PodExited, store.PodTerminated)
	return f, err
}

// listPods lists pods, and serverless workers as pods with
// includeWorkers=true (endpointId then narrows them to one endpoint).
func (a *API) listPods(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, podIncludes...)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	f, err := parsePodFilter(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	sn, err := a.cfg.Mgmt.Snapshot(r.Context())
	if err != nil {
		a.internal(w, r, err)
		return
	}
	refs := podRefs{volumes: sn.Volumes, templates: sn.Templates}
	prices := a.cfg.Mgmt.PricesOrZero()
	out := []any{}
	for _, p := range sn.Pods {
		if f.Matches(mgmt.FactsOf(p)) {
			out = append(out, a.viewPod(p, flags, refs, prices))
		}
	}
	if flags["includeWorkers"] {
		for _, e := range sn.Endpoints {
			image := refs.templates[e.TemplateID].ImageName
			for _, wv := range a.workers(&e) {
				facts := mgmt.EndpointFacts(e)
				if wv.GPU != nil {
					facts.GPUTypeIDs = []string{wv.GPU.ID}
				}
				if wv.ImageName == "" {
					wv.Image, wv.ImageName = image, image
				}
				facts.DesiredStatus, facts.ID, facts.ImageName, facts.Name = wv.DesiredStatus, wv.ID, wv.ImageName, wv.Name
				if f.Matches(facts) {
					out = append(out, wv)
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

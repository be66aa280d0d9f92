package httpapi

import (
	"net/http"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/gorilla/mux"

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

func loadPodRefs(tx *store.Tx) (podRefs, error) {
	refs := podRefs{volumes: map[string]store.NetworkVolume{}, templates: map[string]store.Template{}}
	vs, err := all[store.NetworkVolume](tx, store.Volumes)
	if err != nil {
		return refs, err
	}
	for _, v := range vs {
		refs.volumes[v.ID] = v
	}
	ts, err := all[store.Template](tx, store.Templates)
	for _, t := range ts {
		refs.templates[t.ID] = t
	}
	return refs, err
}

func (s *Server) viewPod(p store.Pod, flags map[string]bool, refs podRefs, prices Prices) podView {
	v := podView{Pod: p, Image: p.ImageName, ConsumerUserID: "berth"}
	gpuType, gpus := "", p.GPUCount
	if p.GPU != nil {
		gpuType, gpus = p.GPU.ID, p.GPU.Count
	} else if len(p.GPUTypeIDs) > 0 {
		gpuType = p.GPUTypeIDs[0]
	}
	v.CostPerHr = prices.Hourly(gpuType, gpus, p.VCPUCount)
	v.AdjustedCostPerHr = v.CostPerHr
	if flags["includeMachine"] {
		m := &machineView{DataCenterID: DataCenterID, Location: "local", CPUCount: goruntime.NumCPU(), SecureCloud: true, SupportPublicIP: true}
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
func (s *Server) writePod(w http.ResponseWriter, r *http.Request, code int, p store.Pod, flags map[string]bool) {
	var refs podRefs
	if flags["includeNetworkVolume"] || flags["includeTemplate"] {
		var err error
		if err = s.cfg.Store.View(func(tx *store.Tx) error { refs, err = loadPodRefs(tx); return err }); err != nil {
			s.internal(w, r, err)
			return
		}
	}
	writeJSON(w, code, s.viewPod(p, flags, refs, s.mg.PricesOrZero()))
}

func (s *Server) getPod(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, podIncludes...)
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	p, err := s.mg.GetPod(r.Context(), mux.Vars(r)["podId"])
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	s.writePod(w, r, http.StatusOK, p, flags)
}

// podFilter holds GET /pods' filters.
type podFilter struct {
	computeType, desiredStatus, endpointID, id, imageName, name, volumeID, templateID string
	cpuFlavors, dataCenters, gpuTypes                                                 []string
}

func parsePodFilter(r *http.Request) (podFilter, error) {
	q := r.URL.Query()
	f := podFilter{
		endpointID: q.Get("endpointId"), id: q.Get("id"), imageName: q.Get("imageName"), name: q.Get("name"),
		volumeID: q.Get("networkVolumeId"), templateID: q.Get("templateId"),
		cpuFlavors: queryList(r, "cpuFlavorId"), dataCenters: queryList(r, "dataCenterId"), gpuTypes: queryList(r, "gpuTypeId"),
	}
	var err error
	if f.computeType, err = queryEnum(r, "computeType", "", "GPU", "CPU"); err != nil {
		return f, err
	}
	f.desiredStatus, err = queryEnum(r, "desiredStatus", "", store.PodRunning, store.PodExited, store.PodTerminated)
	return f, err
}

// match checks the filters against one pod or worker's values.
func (f podFilter) match(computeType, desired, endpointID, id, image, name, volume, template string, cpuFlavors, gpuTypes []string) bool {
	eq := func(want, got string) bool { return want == "" || want == got }
	anyOf := func(want, got []string) bool {
		if len(want) == 0 {
			return true
		}
		for _, g := range got {
			if slices.Contains(want, g) {
				return true
			}
		}
		return false
	}
	return eq(f.computeType, computeType) && eq(f.desiredStatus, desired) && eq(f.endpointID, endpointID) &&
		eq(f.id, id) && eq(f.imageName, image) && eq(f.name, name) && eq(f.volumeID, volume) && eq(f.templateID, template) &&
		anyOf(f.cpuFlavors, cpuFlavors) && anyOf(f.gpuTypes, gpuTypes) && anyOf(f.dataCenters, []string{DataCenterID})
}

// listPods lists pods, and serverless workers as pods with
// includeWorkers=true (endpointId then narrows them to one endpoint).
func (s *Server) listPods(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, podIncludes...)
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	f, err := parsePodFilter(r)
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	var pods []store.Pod
	var eps []store.Endpoint
	var refs podRefs
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if pods, err = all[store.Pod](tx, store.Pods); err != nil {
			return err
		}
		if eps, err = all[store.Endpoint](tx, store.Endpoints); err != nil {
			return err
		}
		refs, err = loadPodRefs(tx)
		return err
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	byCreated(pods, func(p store.Pod) time.Time { return p.CreatedAt }, func(p store.Pod) string { return p.ID })
	prices := s.mg.PricesOrZero()
	out := []any{}
	for _, p := range pods {
		gpus := p.GPUTypeIDs
		if p.GPU != nil {
			gpus = []string{p.GPU.ID}
		}
		if f.match(p.ComputeType, p.DesiredStatus, "", p.ID, p.ImageName, p.Name, p.NetworkVolumeID, p.TemplateID, p.CPUFlavorIDs, gpus) {
			out = append(out, s.viewPod(p, flags, refs, prices))
		}
	}
	if flags["includeWorkers"] {
		byCreated(eps, func(e store.Endpoint) time.Time { return e.CreatedAt }, func(e store.Endpoint) string { return e.ID })
		for _, e := range eps {
			image := refs.templates[e.TemplateID].ImageName
			for _, wv := range s.endpointWorkers(&e) {
				gpus := e.GPUTypeIDs
				if wv.GPU != nil {
					gpus = []string{wv.GPU.ID}
				}
				if wv.ImageName == "" {
					wv.Image, wv.ImageName = image, image
				}
				if f.match(e.ComputeType, wv.DesiredStatus, e.ID, wv.ID, wv.ImageName, wv.Name, e.NetworkVolumeID, e.TemplateID, e.CPUFlavorIDs, gpus) {
					out = append(out, wv)
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

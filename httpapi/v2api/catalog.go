package v2api

import (
	"net/http"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"

	"berth/gpu"
	"berth/mgmt"
)

// The catalogue is this host: its GPUs (from NVML), its CPUs and its one
// data centre, plus RunPod's GPU type ids that Berth accepts (see
// gpu/ids.go), shown with maxCount 0 and availability NONE when this host
// has none of them.

// GPUType is v2's GpuType.
type GPUType struct {
	ID           string        `json:"id"`
	Name         string        `json:"name"`
	Pool         *string       `json:"pool"`
	Manufacturer string        `json:"manufacturer"`
	Memory       int           `json:"memory"`
	Secure       bool          `json:"secure"`
	Community    bool          `json:"community"`
	Price        GPUPrice      `json:"price"`
	MaxCount     MaxCount      `json:"maxCount"`
	Availability string        `json:"availability,omitempty"`
	DataCenters  []Available   `json:"dataCenters,omitempty"`
	CudaVersions []CudaVersion `json:"cudaVersions,omitempty"`
	Free         int           `json:"free"` // Berth: GPUs of this type no worker or pod holds
}

type GPUPrice struct {
	Secure     float64 `json:"secure"`
	Community  float64 `json:"community"`
	Serverless float64 `json:"serverless"`
}

type MaxCount struct {
	Secure    int `json:"secure"`
	Community int `json:"community"`
}

// Available is v2's DataCenterAvailability / CatalogResourceAvailability.
type Available struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Availability string `json:"availability"`
}

type CudaVersion struct {
	Version   string `json:"version"`
	Available bool   `json:"available"`
}

const dcName = "this Berth host"

// availabilityRules are v2.json's rules between the catalogue's
// parameters (400): include=AVAILABILITY needs product, and product and
// the availability filters are valid only with it; cudaVersions and
// minCudaVersion exclude each other.
func availabilityRules(r *http.Request, filters ...string) error {
	q := r.URL.Query()
	include := len(queryList(r, "include")) > 0
	product := len(queryList(r, "product")) > 0
	switch {
	case include && !product:
		return mgmt.InvalidInput("product", "product is required with include=AVAILABILITY: availability differs by product (POD, SERVERLESS…)")
	case product && !include:
		return mgmt.InvalidInput("product", "product is valid only with include=AVAILABILITY")
	case q.Has("cudaVersions") && q.Has("minCudaVersion"):
		return mgmt.InvalidInput("cudaVersions", "cudaVersions and minCudaVersion are mutually exclusive: give an exact set or a floor")
	}
	if !include {
		for _, f := range filters {
			if q.Has(f) {
				return mgmt.InvalidInput(f, "%s is valid only with include=AVAILABILITY", f)
			}
		}
	}
	return nil
}

func (a *API) gpuTypes(r *http.Request) ([]GPUType, error) {
	if err := availabilityRules(r, "count", "cloud", "countryCodes", "cudaVersions", "minCudaVersion"); err != nil {
		return nil, err
	}
	q := r.URL.Query()
	include := queryList(r, "include") // parameters checked by their schemas (params.go)
	count := 0
	if v := q.Get("count"); v != "" {
		count, _ = strconv.Atoi(v)
	}
	cloud := q.Get("cloud")
	var devs []gpu.Status
	if a.cfg.GPUs != nil {
		devs = a.cfg.GPUs()
	}
	// One catalogue for every API surface (mgmt.GPUCatalogue).
	var out []GPUType
	for _, c := range mgmt.GPUCatalogue(devs, a.cfg.Mgmt.PricesOrZero()) {
		g := GPUType{ID: c.ID, Name: strings.TrimPrefix(c.ID, "NVIDIA "), Manufacturer: "NVIDIA", Memory: c.MemoryGB,
			Secure: c.Total > 0, MaxCount: MaxCount{Secure: c.Total}, Free: c.Free,
			Price: GPUPrice{Secure: c.Price, Serverless: c.Price}}
		if strings.HasPrefix(c.ID, "AMD ") {
			g.Manufacturer = "AMD"
		}
		if c.Pool != "" {
			g.Pool = ptr(c.Pool)
		}
		if len(include) > 0 {
			g.Availability = c.Stock(1)
			if g.Availability == "" {
				g.Availability = "NONE"
			}
			g.DataCenters = []Available{{ID: mgmt.DataCenterID, Name: dcName, Availability: g.Availability}}
		}
		if cloud == "COMMUNITY" || (count > 0 && c.Total < count) {
			continue
		}
		out = append(out, g)
	}
	return out, nil
}

func (a *API) listGPUTypes(w http.ResponseWriter, r *http.Request) {
	gs, err := a.gpuTypes(r)
	if gs == nil {
		gs = []GPUType{}
	}
	a.answer(w, r, http.StatusOK, GPUList{GPUs: gs}, err)
}

func (a *API) getGPUType(w http.ResponseWriter, r *http.Request) {
	gs, err := a.gpuTypes(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id := pathID(r)
	for _, g := range gs {
		if g.ID == id || g.ID == gpu.TypeID(id) {
			writeJSON(w, http.StatusOK, g)
			return
		}
	}
	problem(w, http.StatusNotFound, "GPU type "+id+" not found: it is not one of RunPod's gpuTypeIds nor on this host")
}

// CPUType is v2's CpuType: RunPod's CPU flavours, run on this host's CPUs.
type CPUType struct {
	ID           string      `json:"id"`
	Name         string      `json:"name"`
	Group        string      `json:"group"`
	VCPU         VCPURange   `json:"vcpu"`
	RAMGBPerVCPU float64     `json:"ramGbPerVcpu"`
	Price        CPUPrice    `json:"price"`
	Availability string      `json:"availability,omitempty"`
	DataCenters  []Available `json:"dataCenters,omitempty"`
}

type VCPURange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

type CPUPrice struct {
	SecurePerVCPU     float64 `json:"securePerVcpu"`
	ServerlessPerVCPU float64 `json:"serverlessPerVcpu"`
}

func (a *API) cpuTypes(r *http.Request) ([]CPUType, error) {
	if err := availabilityRules(r, "vcpuCount"); err != nil {
		return nil, err
	}
	include := queryList(r, "include")
	n := goruntime.NumCPU()
	want := 0
	if v := r.URL.Query().Get("vcpuCount"); v != "" {
		want, _ = strconv.Atoi(v)
		if want&(want-1) != 0 {
			return nil, mgmt.InvalidInput("vcpuCount", "vcpuCount must be a power of two, got %d", want)
		}
	}
	price := a.cfg.Mgmt.PricesOrZero().VCPUHourly
	names := map[byte]string{'c': "Compute-Optimized", 'g': "General Purpose", 'm': "Memory-Optimized"}
	var out []CPUType
	for _, id := range mgmt.CPUFlavors {
		c := CPUType{ID: id, Name: names[id[len(id)-1]], Group: id[:len(id)-1], VCPU: VCPURange{Min: 2, Max: max(2, n)},
			RAMGBPerVCPU: float64(gpu.CPUMemoryPerVCPU(id)), Price: CPUPrice{SecurePerVCPU: price, ServerlessPerVCPU: price}}
		if len(include) > 0 {
			c.Availability = "HIGH"
			c.DataCenters = []Available{{ID: mgmt.DataCenterID, Name: dcName, Availability: "HIGH"}}
		}
		if want > c.VCPU.Max {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

func (a *API) listCPUTypes(w http.ResponseWriter, r *http.Request) {
	cs, err := a.cpuTypes(r)
	if cs == nil {
		cs = []CPUType{}
	}
	a.answer(w, r, http.StatusOK, CPUList{CPUs: cs}, err)
}

func (a *API) getCPUType(w http.ResponseWriter, r *http.Request) {
	cs, err := a.cpuTypes(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id := pathID(r)
	for _, c := range cs {
		if c.ID == id {
			writeJSON(w, http.StatusOK, c)
			return
		}
	}
	problem(w, http.StatusNotFound, "CPU type "+id+" not found: Berth runs "+strings.Join(mgmt.CPUFlavors, ", "))
}

// DataCenter is v2's DataCenter: this host.
type DataCenter struct {
	ID                 string      `json:"id"`
	Name               string      `json:"name"`
	Region             string      `json:"region"`
	GlobalNetwork      bool        `json:"globalNetwork"`
	NetworkVolumeTypes []string    `json:"networkVolumeTypes"`
	Compliance         []string    `json:"compliance"`
	GPUAvailability    []Available `json:"gpuAvailability,omitempty"`
	CPUAvailability    []Available `json:"cpuAvailability,omitempty"`
}

func (a *API) dataCenter(r *http.Request) (DataCenter, error) {
	dc := DataCenter{ID: mgmt.DataCenterID, Name: dcName, Region: "UNKNOWN", NetworkVolumeTypes: []string{"STANDARD", "HIGH_PERFORMANCE"}, Compliance: []string{}}
	for _, inc := range queryList(r, "include") {
		switch inc {
		case "GPU_AVAILABILITY":
			var devs []gpu.Status
			if a.cfg.GPUs != nil {
				devs = a.cfg.GPUs()
			}
			dc.GPUAvailability = []Available{}
			for _, c := range mgmt.GPUCatalogue(devs, mgmt.Prices{}) {
				if c.Total > 0 {
					dc.GPUAvailability = append(dc.GPUAvailability, Available{ID: c.ID, Name: strings.TrimPrefix(c.ID, "NVIDIA "), Availability: c.Stock(1)})
				}
			}
		case "CPU_AVAILABILITY":
			dc.CPUAvailability = []Available{}
			for _, id := range mgmt.CPUFlavors {
				dc.CPUAvailability = append(dc.CPUAvailability, Available{ID: id, Name: id, Availability: "HIGH"})
			}
		}
	}
	return dc, nil
}

func (a *API) listDataCenters(w http.ResponseWriter, r *http.Request) {
	dc, err := a.dataCenter(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	keep := true
	if rs := queryList(r, "regions"); len(rs) > 0 && !slices.Contains(rs, dc.Region) {
		keep = false
	}
	for _, t := range queryList(r, "networkVolumeTypes") {
		keep = keep && slices.Contains(dc.NetworkVolumeTypes, t)
	}
	if len(queryList(r, "compliance")) > 0 {
		keep = false // no certifications for a host Berth knows nothing about
	}
	if v := r.URL.Query().Get("globalNetwork"); v != "" {
		keep = keep && (v == "true") == dc.GlobalNetwork
	}
	out := []DataCenter{}
	if keep {
		out = append(out, dc)
	}
	writeJSON(w, http.StatusOK, DataCenterList{DataCenters: out})
}

func (a *API) getDataCenter(w http.ResponseWriter, r *http.Request) {
	dc, err := a.dataCenter(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if id := pathID(r); id != dc.ID {
		problem(w, http.StatusNotFound, "data centre "+id+" not found: this host is the one data centre "+dc.ID+
			" (RunPod data-centre ids are accepted in requests and mapped to it)")
		return
	}
	writeJSON(w, http.StatusOK, dc)
}

// GPUList, CPUList and DataCenterList are v2's list answers.
type GPUList struct {
	GPUs []GPUType `json:"gpus"`
}

type CPUList struct {
	CPUs []CPUType `json:"cpus"`
}

type DataCenterList struct {
	DataCenters []DataCenter `json:"dataCenters"`
}

package mgmt

import (
	"context"
	"maps"
	"slices"
	"time"

	"berth/queue"
	"berth/store"
)

// EndpointInput creates or updates a serverless endpoint. nil fields are
// not given. GPUTypeIDs takes RunPod type ids, pool ids and "-" exclusions
// (gpu.SplitIDs splits GraphQL's gpuIds). ComputeType and Type are fixed
// when the endpoint is created: on an update they may only repeat the
// current value.
type EndpointInput struct {
	Name                *string
	TemplateID          *string
	Type                *string // QUEUE or LOAD_BALANCER
	ComputeType         *string // GPU or CPU
	GPUTypeIDs          []string
	GPUCount            *int
	CPUFlavorIDs        []string
	VCPUCount           *int
	InstanceIDs         []string
	AllowedCudaVersions []string // nil: not given; [] clears
	MinCudaVersion      *string  // "" clears
	DataCenterIDs       []string
	NetworkVolumeID     *string
	NetworkVolumeIDs    []string
	IdleTimeout         *int // seconds, 1-3600
	ScalerType          *string
	ScalerValue         *int
	WorkersMin          *int
	WorkersMax          *int
	Flashboot           *bool
	ExecutionTimeoutMs  *int64
	Env                 map[string]string
}

// EndpointOptions are a call's options beyond the endpoint's fields.
type EndpointOptions struct {
	// V2Rules applies the rules RunPod's REST v2 states and its GraphQL
	// does not (runpod-python relies on their absence there): a "-"
	// exclusion must name a GPU type of one of the listed pools and leave
	// one, and idleTimeout is refused on a queue endpoint that scales on
	// REQUEST_COUNT.
	V2Rules bool
}

// NewEndpointDefaults is an endpoint before its input is applied (RunPod's
// defaults).
func NewEndpointDefaults() store.Endpoint {
	return store.Endpoint{
		Type: store.EndpointQueue, ComputeType: "GPU", GPUCount: 1, VCPUCount: 2, IdleTimeout: 5, ScalerType: "QUEUE_DELAY", ScalerValue: 4,
		WorkersMin: 0, WorkersMax: 3, ExecutionTimeoutMs: queue.DefaultExecTimeout.Milliseconds(),
		GPUTypeIDs: []string{}, AllowedCudaVersions: []string{}, DataCenterIDs: []string{DataCenterID}, Env: map[string]string{},
	}
}

// ApplyEndpoint validates in and applies it to e (no store access): every
// rule of an endpoint's fields, each alone and together. The warnings for
// unknown ids replace e.Warnings when their field is given.
func ApplyEndpoint(e *store.Endpoint, in EndpointInput, create bool) error {
	return applyEndpoint(e, in, EndpointOptions{}, create)
}

func applyEndpoint(e *store.Endpoint, in EndpointInput, opt EndpointOptions, create bool) error {
	if create {
		if in.TemplateID == nil || *in.TemplateID == "" {
			return invalid("templateId", "templateId is required")
		}
		switch {
		case in.ComputeType != nil:
			if err := oneOf("computeType", in.ComputeType, []string{"GPU", "CPU"}, &e.ComputeType); err != nil {
				return err
			}
		case (len(in.CPUFlavorIDs) > 0 || len(in.InstanceIDs) > 0) && len(in.GPUTypeIDs) == 0:
			e.ComputeType = "CPU" // CPU flavours or instances name a CPU endpoint
		}
		if in.Type != nil {
			switch *in.Type {
			case store.EndpointQueue:
				e.Type = store.EndpointQueue
			case store.EndpointLoadBalancer:
				// RunPod scales load-balancing workers on in-flight requests only.
				e.Type, e.ScalerType = store.EndpointLoadBalancer, "REQUEST_COUNT"
			default:
				return invalid("type", "type must be QUEUE or LOAD_BALANCER, got %s", quote(ShortID(*in.Type)))
			}
		}
	} else {
		// The same value again is accepted: a client may PATCH back a whole record.
		if in.ComputeType != nil && *in.ComputeType != computeType(e) {
			return invalid("computeType", "computeType is fixed when an endpoint is created: endpoint %s is a %s endpoint", e.ID, computeType(e))
		}
		if in.Type != nil && *in.Type != endpointType(e) {
			return invalid("type", "type is fixed when an endpoint is created: endpoint %s is a %s endpoint", e.ID, endpointType(e))
		}
	}
	if in.Name != nil {
		if *in.Name != "" { // "": the endpoint's id names it
			if err := checkName(*in.Name); err != nil {
				return err
			}
		}
		e.Name = *in.Name
	}
	if in.TemplateID != nil {
		if *in.TemplateID == "" {
			return invalid("templateId", "templateId must not be empty")
		}
		if err := checkID("templateId", *in.TemplateID); err != nil {
			return err
		}
		e.TemplateID = *in.TemplateID
	}
	var warn []string
	if in.GPUTypeIDs != nil {
		w, err := checkGPUList("gpuTypeIds", in.GPUTypeIDs, opt.V2Rules)
		if err != nil {
			return err
		}
		warn = append(warn, w...)
		e.GPUTypeIDs = in.GPUTypeIDs
	} else {
		warn = append(warn, fieldWarnings(e.Warnings, "gpuTypeIds")...)
	}
	if in.GPUCount != nil {
		if err := LimitGPUCount.Check(int64(*in.GPUCount)); err != nil {
			return err
		}
		e.GPUCount = *in.GPUCount
	}
	if in.CPUFlavorIDs != nil {
		if err := checkCPUFlavors("cpuFlavorIds", in.CPUFlavorIDs); err != nil {
			return err
		}
		e.CPUFlavorIDs = in.CPUFlavorIDs
	}
	if in.VCPUCount != nil {
		err := LimitVCPUsBeside.Check(int64(*in.VCPUCount))
		if computeType(e) == "CPU" {
			err = checkVCPUs("vcpuCount", *in.VCPUCount)
		}
		if err != nil {
			return err
		}
		e.VCPUCount = *in.VCPUCount
	}
	if in.InstanceIDs != nil {
		if err := checkInstanceIDs(in.InstanceIDs); err != nil {
			return err
		}
		e.InstanceIDs = in.InstanceIDs
	}
	if in.AllowedCudaVersions != nil {
		if err := checkCudaVersions(in.AllowedCudaVersions); err != nil {
			return err
		}
		e.AllowedCudaVersions = in.AllowedCudaVersions
	}
	if in.MinCudaVersion != nil {
		if *in.MinCudaVersion != "" && !cudaRe.MatchString(*in.MinCudaVersion) {
			return invalid("minCudaVersion", "minCudaVersion: %s is not a CUDA version such as \"12.4\"", quote(ShortID(*in.MinCudaVersion)))
		}
		e.MinCudaVersion = *in.MinCudaVersion
	}
	if in.DataCenterIDs != nil {
		if err := checkDataCenters("dataCenterIds", in.DataCenterIDs, &warn); err != nil {
			return err
		}
		e.DataCenterIDs = in.DataCenterIDs
	} else {
		warn = append(warn, fieldWarnings(e.Warnings, "dataCenterIds")...)
	}
	if in.NetworkVolumeID != nil {
		if *in.NetworkVolumeID != "" {
			if err := checkID("networkVolumeId", *in.NetworkVolumeID); err != nil {
				return err
			}
		}
		e.NetworkVolumeID = *in.NetworkVolumeID
	}
	if in.NetworkVolumeIDs != nil {
		if err := checkIDList("networkVolumeIds", in.NetworkVolumeIDs, LimitVolumeIDs); err != nil {
			return err
		}
		e.NetworkVolumeIDs = in.NetworkVolumeIDs
	}
	if in.IdleTimeout != nil {
		if err := LimitIdleTimeout.Check(int64(*in.IdleTimeout)); err != nil {
			return err
		}
		e.IdleTimeout = *in.IdleTimeout
	}
	if in.ScalerType != nil {
		switch *in.ScalerType {
		case "QUEUE_DELAY", "REQUEST_COUNT":
			e.ScalerType = *in.ScalerType
		default:
			return invalid("scalerType", "scalerType must be QUEUE_DELAY or REQUEST_COUNT, got %s", quote(ShortID(*in.ScalerType)))
		}
	}
	if e.LoadBalancer() && e.ScalerType != "REQUEST_COUNT" {
		return invalid("scalerType", "scalerType of a LOAD_BALANCER endpoint must be REQUEST_COUNT, got %q", e.ScalerType)
	}
	if in.ScalerValue != nil {
		e.ScalerValue = *in.ScalerValue
	}
	if in.ScalerValue != nil || in.ScalerType != nil {
		if err := scalerLimit(e.ScalerType).Check(int64(e.ScalerValue)); err != nil {
			return err
		}
	}
	if opt.V2Rules && in.IdleTimeout != nil && !e.LoadBalancer() && e.ScalerType == "REQUEST_COUNT" {
		return invalid("idleTimeout", "idleTimeout does not apply to a queue endpoint scaling on REQUEST_COUNT")
	}
	if in.WorkersMin != nil {
		if err := LimitWorkersMin.Check(int64(*in.WorkersMin)); err != nil {
			return err
		}
		e.WorkersMin = *in.WorkersMin
	}
	if in.WorkersMax != nil {
		if err := LimitWorkersMax.Check(int64(*in.WorkersMax)); err != nil {
			return err
		}
		e.WorkersMax = *in.WorkersMax
	}
	if e.WorkersMin > e.WorkersMax {
		return invalid("workersMin", "workersMin (%d) must not exceed workersMax (%d)", e.WorkersMin, e.WorkersMax)
	}
	if in.Flashboot != nil {
		e.Flashboot = *in.Flashboot
	}
	if in.ExecutionTimeoutMs != nil {
		if err := LimitExecTimeout.Check(*in.ExecutionTimeoutMs); err != nil {
			return err
		}
		e.ExecutionTimeoutMs = *in.ExecutionTimeoutMs
	}
	if in.Env != nil {
		if err := validateEnv(in.Env); err != nil {
			return err
		}
		e.Env = in.Env
	}
	if err := checkCompute(e, in); err != nil {
		return err
	}
	e.Warnings = warn
	return nil
}

// checkCompute checks what a GPU or a CPU endpoint may carry, naming the
// field this input gave.
func checkCompute(e *store.Endpoint, in EndpointInput) error {
	if computeType(e) == "CPU" {
		if len(e.GPUTypeIDs) > 0 {
			return invalid("gpuTypeIds", "gpuTypeIds: endpoint %s is a CPU endpoint and has no GPUs", endpointName(e))
		}
		if len(e.AllowedCudaVersions) > 0 || e.MinCudaVersion != "" {
			f := "allowedCudaVersions"
			if in.MinCudaVersion != nil {
				f = "minCudaVersion"
			}
			return invalid(f, "%s: endpoint %s is a CPU endpoint and has no CUDA", f, endpointName(e))
		}
		return nil
	}
	switch {
	case len(e.CPUFlavorIDs) > 0:
		return invalid("cpuFlavorIds", "cpuFlavorIds are for CPU endpoints; endpoint %s is a GPU endpoint", endpointName(e))
	case len(e.InstanceIDs) > 0:
		return invalid("instanceIds", "instanceIds are for CPU endpoints; endpoint %s is a GPU endpoint", endpointName(e))
	case len(e.AllowedCudaVersions) > 0 && e.MinCudaVersion != "":
		f := "allowedCudaVersions"
		if in.MinCudaVersion != nil && in.AllowedCudaVersions == nil {
			f = "minCudaVersion"
		}
		return invalid(f, "%s: allowedCudaVersions and minCudaVersion are mutually exclusive: give an exact set or a floor, not both", f)
	}
	return nil
}

func endpointName(e *store.Endpoint) string {
	if e.ID == "" {
		return "(new)"
	}
	return e.ID
}

// computeType is e's compute type, GPU for records older than the field.
func computeType(e *store.Endpoint) string {
	if e.ComputeType == "" {
		return "GPU"
	}
	return e.ComputeType
}

// scalerLimit is the range of scalerValue for a scaler type.
func scalerLimit(scalerType string) Limit {
	if scalerType == "REQUEST_COUNT" {
		return LimitRequestCount
	}
	return LimitQueueDelay
}

// endpointType is e's type, QUEUE for records older than the field.
func endpointType(e *store.Endpoint) string {
	if e.Type == "" {
		return store.EndpointQueue
	}
	return e.Type
}

// fieldWarnings keeps the warnings about field.
func fieldWarnings(ws []string, field string) []string {
	var out []string
	for _, w := range ws {
		if len(w) > len(field) && w[:len(field)+1] == field+":" {
			out = append(out, w)
		}
	}
	return out
}

// checkEndpointRefs checks that the template and network volumes an
// endpoint names exist.
func checkEndpointRefs(tx *store.Tx, e *store.Endpoint) error {
	if tx.GetRaw(store.Templates, e.TemplateID) == nil {
		return invalid("templateId", "templateId %q does not exist", e.TemplateID)
	}
	if e.NetworkVolumeID != "" && tx.GetRaw(store.Volumes, e.NetworkVolumeID) == nil {
		return invalid("networkVolumeId", "networkVolumeId %q does not exist", e.NetworkVolumeID)
	}
	for _, v := range e.NetworkVolumeIDs {
		if tx.GetRaw(store.Volumes, v) == nil {
			return invalid("networkVolumeIds", "networkVolumeIds: %q does not exist", v)
		}
	}
	return nil
}

// CreateEndpoint validates in and stores a new endpoint (version 1).
func (s *Service) CreateEndpoint(ctx context.Context, in EndpointInput) (store.Endpoint, error) {
	return s.CreateEndpointWith(ctx, in, EndpointOptions{})
}

// CreateEndpointWith is CreateEndpoint with options.
func (s *Service) CreateEndpointWith(_ context.Context, in EndpointInput, opt EndpointOptions) (store.Endpoint, error) {
	e := NewEndpointDefaults()
	if err := applyEndpoint(&e, in, opt, true); err != nil {
		return store.Endpoint{}, err
	}
	e.ID = queue.NewID(14)
	e.UserID = "berth"
	e.Version = 1
	e.CreatedAt = s.now()
	if e.Name == "" {
		e.Name = e.ID
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := checkEndpointRefs(tx, &e); err != nil {
			return err
		}
		return tx.Apply(store.Put(store.Endpoints, e.ID, e), releaseOp(e, store.Release{CreatedAt: e.CreatedAt}))
	})
	if err != nil {
		return store.Endpoint{}, err
	}
	s.changed(e.ID)
	return e, nil
}

// EndpointRolls reports whether an endpoint change needs new worker
// containers: template, env, GPUs, CPUs or volumes. Such a change bumps
// the version (a release).
func EndpointRolls(a, b store.Endpoint) bool {
	return a.TemplateID != b.TemplateID || !maps.Equal(a.Env, b.Env) ||
		!slices.Equal(a.GPUTypeIDs, b.GPUTypeIDs) || a.GPUCount != b.GPUCount || a.VCPUCount != b.VCPUCount ||
		!slices.Equal(a.CPUFlavorIDs, b.CPUFlavorIDs) || !slices.Equal(a.InstanceIDs, b.InstanceIDs) ||
		a.NetworkVolumeID != b.NetworkVolumeID || !slices.Equal(a.NetworkVolumeIDs, b.NetworkVolumeIDs)
}

// UpdateEndpoint applies in to endpoint id, bumping its version when its
// workers must roll.
func (s *Service) UpdateEndpoint(ctx context.Context, id string, in EndpointInput) (store.Endpoint, error) {
	return s.UpdateEndpointWith(ctx, id, in, EndpointOptions{})
}

// UpdateEndpointWith is UpdateEndpoint with options.
func (s *Service) UpdateEndpointWith(_ context.Context, id string, in EndpointInput, opt EndpointOptions) (store.Endpoint, error) {
	var e store.Endpoint
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
			return err
		}
		e.Type = endpointType(&e)
		before := e
		if err := applyEndpoint(&e, in, opt, false); err != nil {
			return err
		}
		if e.Name == "" {
			e.Name = e.ID
		}
		if err := checkEndpointRefs(tx, &e); err != nil {
			return err
		}
		ops := []store.Op{store.Put(store.Endpoints, id, e)}
		if EndpointRolls(before, e) {
			e.Version++
			ops = []store.Op{store.Put(store.Endpoints, id, e), releaseOp(e, store.Release{CreatedAt: s.now(), Diff: endpointDiff(before, e)})}
		}
		return tx.Apply(ops...)
	})
	if err != nil {
		return store.Endpoint{}, err
	}
	s.changed(id)
	return e, nil
}

// DeleteEndpoint removes the record; Config.EndpointDeleted then cancels
// its jobs and stops its workers.
func (s *Service) DeleteEndpoint(_ context.Context, id string) error {
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.Endpoints, id) == nil {
			return notFoundID("endpoint", id)
		}
		ops, err := deleteReleases(tx, id)
		if err != nil {
			return err
		}
		return tx.Apply(append(ops, store.Delete(store.Endpoints, id))...)
	})
	if err != nil {
		return err
	}
	if s.cfg.EndpointDeleted != nil {
		s.cfg.EndpointDeleted(id)
	}
	return nil
}

// Endpoints reads one endpoint (id != "") or all, oldest first, and when
// withTemplates the templates by id.
func (s *Service) Endpoints(_ context.Context, id string, withTemplates bool) ([]store.Endpoint, map[string]store.Template, error) {
	var eps []store.Endpoint
	var tmpl map[string]store.Template
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if id != "" {
			var e store.Endpoint
			if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
				return err
			}
			eps = []store.Endpoint{e}
		} else {
			var err error
			if eps, err = all[store.Endpoint](tx, store.Endpoints); err != nil {
				return err
			}
		}
		if withTemplates {
			ts, err := all[store.Template](tx, store.Templates)
			if err != nil {
				return err
			}
			tmpl = ByID(ts, func(t store.Template) string { return t.ID })
		}
		return nil
	})
	for i := range eps {
		eps[i].Type = endpointType(&eps[i])
	}
	byCreated(eps, func(e store.Endpoint) time.Time { return e.CreatedAt }, func(e store.Endpoint) string { return e.ID })
	return eps, tmpl, err
}

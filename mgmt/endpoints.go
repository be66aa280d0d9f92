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
// not given. ComputeType is creation-only. GPUTypeIDs takes RunPod type ids,
// pool ids and "-" exclusions (gpu.SplitIDs splits GraphQL's gpuIds).
type EndpointInput struct {
	Name                *string
	TemplateID          *string
	Type                *string // QUEUE or LOAD_BALANCER; creation-only
	ComputeType         *string // GPU or CPU
	GPUTypeIDs          []string
	GPUCount            *int
	CPUFlavorIDs        []string
	VCPUCount           *int
	InstanceIDs         []string
	AllowedCudaVersions []string
	MinCudaVersion      *string
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

// NewEndpointDefaults is an endpoint before its input is applied (RunPod's
// defaults).
func NewEndpointDefaults() store.Endpoint {
	return store.Endpoint{
		Type: store.EndpointQueue, ComputeType: "GPU", GPUCount: 1, VCPUCount: 2, IdleTimeout: 5, ScalerType: "QUEUE_DELAY", ScalerValue: 4,
		WorkersMin: 0, WorkersMax: 3, ExecutionTimeoutMs: queue.DefaultExecTimeout.Milliseconds(),
		GPUTypeIDs: []string{}, AllowedCudaVersions: []string{}, DataCenterIDs: []string{DataCenterID}, Env: map[string]string{},
	}
}

// ApplyEndpoint validates in and applies it to e (no store access). The
// warnings for unknown ids replace e.Warnings when their field is given.
func ApplyEndpoint(e *store.Endpoint, in EndpointInput, create bool) error {
	if create {
		if in.TemplateID == nil || *in.TemplateID == "" {
			return invalid("templateId", "templateId is required")
		}
		if in.ComputeType != nil {
			switch *in.ComputeType {
			case "GPU", "CPU":
				e.ComputeType = *in.ComputeType
			default:
				return invalid("computeType", "computeType must be GPU or CPU, got %q", *in.ComputeType)
			}
		}
		if in.Type != nil {
			switch *in.Type {
			case store.EndpointQueue:
				e.Type = store.EndpointQueue
			case store.EndpointLoadBalancer:
				// RunPod scales load-balancing workers on in-flight requests only.
				e.Type, e.ScalerType = store.EndpointLoadBalancer, "REQUEST_COUNT"
			default:
				return invalid("type", "type must be QUEUE or LOAD_BALANCER, got %q", *in.Type)
			}
		}
	} else {
		if in.ComputeType != nil {
			return invalid("computeType", "computeType cannot be changed after an endpoint is created")
		}
		// The same type again is accepted: a client may PATCH back a whole record.
		if in.Type != nil && *in.Type != endpointType(e) {
			return invalid("type", "type cannot be changed after an endpoint is created (it is %s)", endpointType(e))
		}
	}
	if in.Name != nil {
		e.Name = *in.Name
	}
	if in.TemplateID != nil {
		if *in.TemplateID == "" {
			return invalid("templateId", "templateId must not be empty")
		}
		e.TemplateID = *in.TemplateID
	}
	var warn []string
	if in.GPUTypeIDs != nil {
		w, err := CheckGPUIDs("gpuTypeIds", in.GPUTypeIDs)
		if err != nil {
			return err
		}
		warn = append(warn, w...)
		e.GPUTypeIDs = in.GPUTypeIDs
	} else {
		warn = append(warn, fieldWarnings(e.Warnings, "gpuTypeIds")...)
	}
	if in.GPUCount != nil {
		if *in.GPUCount < 1 {
			return invalid("gpuCount", "gpuCount must be at least 1, got %d", *in.GPUCount)
		}
		e.GPUCount = *in.GPUCount
	}
	if in.CPUFlavorIDs != nil {
		e.CPUFlavorIDs = in.CPUFlavorIDs
	}
	if in.VCPUCount != nil {
		if *in.VCPUCount < 1 {
			return invalid("vcpuCount", "vcpuCount must be at least 1, got %d", *in.VCPUCount)
		}
		e.VCPUCount = *in.VCPUCount
	}
	if in.InstanceIDs != nil {
		e.InstanceIDs = in.InstanceIDs
	}
	if in.AllowedCudaVersions != nil {
		e.AllowedCudaVersions = in.AllowedCudaVersions
	}
	if in.MinCudaVersion != nil {
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
		e.NetworkVolumeID = *in.NetworkVolumeID
	}
	if in.NetworkVolumeIDs != nil {
		e.NetworkVolumeIDs = in.NetworkVolumeIDs
	}
	if in.IdleTimeout != nil {
		if *in.IdleTimeout < 1 || *in.IdleTimeout > 3600 {
			return invalid("idleTimeout", "idleTimeout must be 1-3600 seconds, got %d", *in.IdleTimeout)
		}
		e.IdleTimeout = *in.IdleTimeout
	}
	if in.ScalerType != nil {
		switch *in.ScalerType {
		case "QUEUE_DELAY", "REQUEST_COUNT":
			e.ScalerType = *in.ScalerType
		default:
			return invalid("scalerType", "scalerType must be QUEUE_DELAY or REQUEST_COUNT, got %q", *in.ScalerType)
		}
	}
	if e.LoadBalancer() && e.ScalerType != "REQUEST_COUNT" {
		return invalid("scalerType", "scalerType of a LOAD_BALANCER endpoint must be REQUEST_COUNT, got %q", e.ScalerType)
	}
	if in.ScalerValue != nil {
		if *in.ScalerValue < 1 {
			return invalid("scalerValue", "scalerValue must be at least 1, got %d", *in.ScalerValue)
		}
		e.ScalerValue = *in.ScalerValue
	}
	if in.WorkersMin != nil {
		if *in.WorkersMin < 0 {
			return invalid("workersMin", "workersMin must not be negative, got %d", *in.WorkersMin)
		}
		e.WorkersMin = *in.WorkersMin
	}
	if in.WorkersMax != nil {
		if *in.WorkersMax < 0 {
			return invalid("workersMax", "workersMax must not be negative, got %d", *in.WorkersMax)
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
		d := time.Duration(*in.ExecutionTimeoutMs) * time.Millisecond
		if d < queue.MinExecutionTimeout || d > queue.MaxExecutionTimeout {
			return invalid("executionTimeoutMs", "executionTimeoutMs must be between %d and %d, got %d", queue.MinExecutionTimeout.Milliseconds(), queue.MaxExecutionTimeout.Milliseconds(), *in.ExecutionTimeoutMs)
		}
		e.ExecutionTimeoutMs = *in.ExecutionTimeoutMs
	}
	if in.Env != nil {
		if err := validateEnv(in.Env); err != nil {
			return err
		}
		e.Env = in.Env
	}
	e.Warnings = warn
	return nil
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
func (s *Service) CreateEndpoint(_ context.Context, in EndpointInput) (store.Endpoint, error) {
	e := NewEndpointDefaults()
	if err := ApplyEndpoint(&e, in, true); err != nil {
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
func (s *Service) UpdateEndpoint(_ context.Context, id string, in EndpointInput) (store.Endpoint, error) {
	if in.ComputeType != nil {
		return store.Endpoint{}, invalid("computeType", "computeType cannot be changed after an endpoint is created")
	}
	var e store.Endpoint
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
			return err
		}
		e.Type = endpointType(&e)
		before := e
		if err := ApplyEndpoint(&e, in, false); err != nil {
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
			return notFound("endpoint %s not found", id)
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

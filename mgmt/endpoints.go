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
	ModelReferences     []string // nil: not given; [] clears
}

// EndpointOptions are a call's options beyond the endpoint's fields.
type EndpointOptions struct {
	// V2Rules applies the rules RunPod's REST v2 states and its GraphQL
	// does not (runpod-python relies on their absence there): a "-"
	// exclusion must name a GPU type of one of the listed pools and leave
	// one, and idleTimeout is refused on a queue endpoint that scales on
	// REQUEST_COUNT.
	V2Rules bool
	// Template, when not nil, gives the endpoint a template of its own,
	// bound to it (deleted with it), made in the same transaction: a copy
	// of the template TemplateID names (on an update without TemplateID,
	// of the endpoint's current one) with these fields applied. REST v2's
	// container fields and GraphQL's inline template. On an update of an
	// endpoint that already has its own template and no TemplateID, that
	// template is changed in place.
	Template *TemplateInput
	// Git sets the repository the endpoint tracks (push to deploy,
	// gitpush.go): REST v2's git field; nil: not given.
	Git *GitTrackInput
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
		if opt.Template == nil && (in.TemplateID == nil || *in.TemplateID == "") {
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
	if in.ModelReferences != nil {
		if err := CheckModelReferences("modelReferences", in.ModelReferences); err != nil {
			return err
		}
		e.ModelReferences = slices.Clone(in.ModelReferences)
		if len(e.ModelReferences) == 0 {
			e.ModelReferences = nil
		}
	}
	if opt.Git != nil {
		if err := applyGit(e, *opt.Git); err != nil {
			return err
		}
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
		return missing("templateId", e.TemplateID)
	}
	if e.NetworkVolumeID != "" && tx.GetRaw(store.Volumes, e.NetworkVolumeID) == nil {
		return missing("networkVolumeId", e.NetworkVolumeID)
	}
	for _, v := range e.NetworkVolumeIDs {
		if tx.GetRaw(store.Volumes, v) == nil {
			return missing("networkVolumeIds", v)
		}
	}
	return nil
}

// CreateEndpoint validates in and stores a new endpoint (version 1).
func (s *Service) CreateEndpoint(ctx context.Context, in EndpointInput) (store.Endpoint, error) {
	return s.CreateEndpointWith(ctx, in, EndpointOptions{})
}

// CreateEndpointWith is CreateEndpoint with options: with a Template, the
// endpoint and its own template are stored in one transaction.
func (s *Service) CreateEndpointWith(ctx context.Context, in EndpointInput, opt EndpointOptions) (store.Endpoint, error) {
	if err := live(ctx); err != nil {
		return store.Endpoint{}, err
	}
	e := NewEndpointDefaults()
	e.ID = queue.NewID(14)
	if err := applyEndpoint(&e, in, opt, true); err != nil {
		return store.Endpoint{}, err
	}
	e.UserID = "berth"
	e.Version = 1
	e.CreatedAt = s.now()
	if e.Name == "" {
		e.Name = e.ID
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		base, err := baseTemplate(tx, in.TemplateID)
		if err != nil {
			return err
		}
		if base != nil && len(base.AllowedCudaVersions) > 0 && in.AllowedCudaVersions == nil && in.MinCudaVersion == nil && computeType(&e) == "GPU" {
			// A GPU endpoint made from a template takes its CUDA constraint
			// unless it gives one (v2.json, gpu.allowedCudaVersions).
			e.AllowedCudaVersions = slices.Clone(base.AllowedCudaVersions)
		}
		if opt.Template != nil {
			t, err := s.newBoundTemplate(tx, base, *opt.Template, &e)
			if err != nil {
				return err
			}
			if err := tx.Apply(store.Put(store.Templates, t.ID, t)); err != nil {
				return err
			}
			e.TemplateID = t.ID
		}
		if err := checkEndpointRefs(tx, &e); err != nil {
			return err
		}
		hook, err := gitHookOps(tx, &e, opt.Git)
		if err != nil {
			return err
		}
		return tx.Apply(append(hook, store.Put(store.Endpoints, e.ID, e), releaseOp(e, store.Release{CreatedAt: e.CreatedAt}))...)
	})
	if err != nil {
		return store.Endpoint{}, err
	}
	s.changed(e.ID)
	return e, nil
}

// baseTemplate reads the template an endpoint is made from; nil when id is
// not given.
func baseTemplate(tx *store.Tx, id *string) (*store.Template, error) {
	if id == nil || *id == "" {
		return nil, nil
	}
	var t store.Template
	if tx.GetRaw(store.Templates, *id) == nil {
		return nil, missing("templateId", *id)
	}
	if err := tx.Get(store.Templates, *id, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// newBoundTemplate makes endpoint e's own template: a copy of base (or a
// serverless template's defaults: no pod volume, no ports) with in
// applied. It is checked against the store but not stored.
func (s *Service) newBoundTemplate(tx *store.Tx, base *store.Template, in TemplateInput, e *store.Endpoint) (store.Template, error) {
	t := NewTemplateDefaults()
	t.VolumeInGb, t.Ports = 0, []string{}
	if base != nil {
		t = *base
		t.DockerEntrypoint, t.DockerStartCmd = slices.Clone(base.DockerEntrypoint), slices.Clone(base.DockerStartCmd)
		t.Env, t.Ports, t.PortLabels = maps.Clone(base.Env), slices.Clone(base.Ports), maps.Clone(base.PortLabels)
		t.AllowedCudaVersions = slices.Clone(base.AllowedCudaVersions)
		t.IsPublic, t.Readme, t.Earned, t.RuntimeInMin = false, "", 0, 0
	}
	if err := ApplyTemplate(&t, in, false); err != nil {
		return store.Template{}, err
	}
	if in.Name == nil {
		name := e.Name
		if r := []rune(name); len(r) > int(LimitName.Max)-8 {
			name = string(r[:LimitName.Max-8])
		}
		t.Name = name + "__" + queue.NewID(6)
	}
	if t.ImageName == "" {
		return store.Template{}, invalid("imageName", "imageName is required when no templateId gives one")
	}
	t.ID, t.CreatedAt, t.IsServerless, t.EndpointID = queue.NewID(10), s.now(), true, e.ID
	if err := checkTemplate(tx, t); err != nil {
		return store.Template{}, err
	}
	return t, nil
}

// EndpointRolls reports whether an endpoint change needs new worker
// containers: template, env, GPUs, CPUs or volumes. Such a change bumps
// the version (a release).
func EndpointRolls(a, b store.Endpoint) bool {
	return a.TemplateID != b.TemplateID || !maps.Equal(a.Env, b.Env) ||
		!slices.Equal(a.GPUTypeIDs, b.GPUTypeIDs) || a.GPUCount != b.GPUCount || a.VCPUCount != b.VCPUCount ||
		!slices.Equal(a.CPUFlavorIDs, b.CPUFlavorIDs) || !slices.Equal(a.InstanceIDs, b.InstanceIDs) ||
		a.NetworkVolumeID != b.NetworkVolumeID || !slices.Equal(a.NetworkVolumeIDs, b.NetworkVolumeIDs) ||
		!slices.Equal(a.ModelReferences, b.ModelReferences)
}

// UpdateEndpoint applies in to endpoint id, bumping its version when its
// workers must roll.
func (s *Service) UpdateEndpoint(ctx context.Context, id string, in EndpointInput) (store.Endpoint, error) {
	return s.UpdateEndpointWith(ctx, id, in, EndpointOptions{})
}

// UpdateEndpointWith is UpdateEndpoint with options: with a Template, the
// endpoint's own template is made or changed in the same transaction (a
// template left unused that was bound to the endpoint goes).
func (s *Service) UpdateEndpointWith(ctx context.Context, id string, in EndpointInput, opt EndpointOptions) (store.Endpoint, error) {
	if err := live(ctx); err != nil {
		return store.Endpoint{}, err
	}
	var e store.Endpoint
	var rolled []string
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
			return err
		}
		e.Type = endpointType(&e)
		before := e
		var diff []store.ReleaseDiff
		if opt.Template != nil {
			var cur store.Template
			if tx.GetRaw(store.Templates, e.TemplateID) != nil {
				if err := tx.Get(store.Templates, e.TemplateID, &cur); err != nil {
					return err
				}
			}
			if in.TemplateID == nil && cur.ID != "" && cur.EndpointID == e.ID {
				// Its own template: changed in place; any other endpoint
				// pointed at it rolls too.
				after := cur
				if err := ApplyTemplate(&after, *opt.Template, false); err != nil {
					return err
				}
				if err := checkTemplate(tx, after); err != nil {
					return err
				}
				if templateRolls(cur, after) {
					diff = templateDiff(cur, after)
					others, err := s.rollUsers(tx, after.ID, id, store.Release{CreatedAt: s.now(), Diff: diff})
					if err != nil {
						return err
					}
					rolled = others
				}
				if err := tx.Apply(store.Put(store.Templates, after.ID, after)); err != nil {
					return err
				}
			} else {
				base := &cur
				if in.TemplateID != nil {
					var err error
					if base, err = baseTemplate(tx, in.TemplateID); err != nil {
						return err
					}
				} else if cur.ID == "" {
					base = nil
				}
				t, err := s.newBoundTemplate(tx, base, *opt.Template, &e)
				if err != nil {
					return err
				}
				if err := tx.Apply(store.Put(store.Templates, t.ID, t)); err != nil {
					return err
				}
				in.TemplateID = &t.ID
			}
		}
		if err := applyEndpoint(&e, in, opt, false); err != nil {
			return err
		}
		if e.Name == "" {
			e.Name = e.ID
		}
		if err := checkEndpointRefs(tx, &e); err != nil {
			return err
		}
		if before.TemplateID != e.TemplateID {
			if err := dropBound(tx, before.TemplateID, id); err != nil {
				return err
			}
		}
		hook, err := gitHookOps(tx, &e, opt.Git)
		if err != nil {
			return err
		}
		ops := []store.Op{store.Put(store.Endpoints, id, e)}
		if EndpointRolls(before, e) || diff != nil {
			e.Version++
			ops = []store.Op{store.Put(store.Endpoints, id, e), releaseOp(e, store.Release{CreatedAt: s.now(), Diff: append(endpointDiff(before, e), diff...)})}
		}
		return tx.Apply(append(hook, ops...)...)
	})
	if err != nil {
		return store.Endpoint{}, err
	}
	s.changed(id)
	for _, o := range rolled {
		s.changed(o)
	}
	return e, nil
}

// rollUsers bumps the version of every endpoint but skip using template
// id (a change to what their workers run) and records the release.
func (s *Service) rollUsers(tx *store.Tx, templateID, skip string, rel store.Release) ([]string, error) {
	eps, err := all[store.Endpoint](tx, store.Endpoints)
	if err != nil {
		return nil, err
	}
	var ops []store.Op
	var rolled []string
	for _, e := range eps {
		if e.TemplateID == templateID && e.ID != skip {
			e.Version++
			ops = append(ops, store.Put(store.Endpoints, e.ID, e), releaseOp(e, rel))
			rolled = append(rolled, e.ID)
		}
	}
	return rolled, tx.Apply(ops...)
}

// dropBound deletes template id when it was bound to endpoint ep and
// nothing else uses it; a bound template something else still uses is
// kept, unbound.
func dropBound(tx *store.Tx, id, ep string) error {
	var t store.Template
	if id == "" || tx.GetRaw(store.Templates, id) == nil {
		return nil
	}
	if err := tx.Get(store.Templates, id, &t); err != nil {
		return err
	}
	if t.EndpointID != ep {
		return nil
	}
	u, err := users(tx,
		func(e store.Endpoint) bool { return e.TemplateID == id && e.ID != ep },
		func(p store.Pod) bool { return p.TemplateID == id })
	if err != nil {
		return err
	}
	if u != "" {
		t.EndpointID = ""
		return tx.Apply(store.Put(store.Templates, id, t))
	}
	return tx.Apply(store.Delete(store.Templates, id))
}

// DeleteEndpoint removes the endpoint, its releases and its own template
// (v2.json: "deletes a serverless endpoint and its bound template") in one
// transaction; then its unfinished jobs are cancelled through the queue
// (Config.Jobs) and Config.EndpointDeleted stops its workers.
func (s *Service) DeleteEndpoint(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		var e store.Endpoint
		if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
			return err
		}
		ops, err := deleteReleases(tx, id)
		if err != nil {
			return err
		}
		bops, err := deleteBuilds(tx, id)
		if err != nil {
			return err
		}
		ops = append(ops, bops...)
		if tx.GetRaw(store.GitHooks, id) != nil {
			ops = append(ops, store.Delete(store.GitHooks, id))
		}
		if err := tx.Apply(append(ops, store.Delete(store.Endpoints, id))...); err != nil {
			return err
		}
		if err := forgetEndpointGrants(tx, id); err != nil { // keys.go
			return err
		}
		return dropBound(tx, e.TemplateID, id)
	})
	if err != nil {
		return err
	}
	s.reloadKeys()
	s.changed(id) // the job API stops taking jobs for it before they are cancelled
	if s.cfg.Jobs != nil {
		if n, err := s.cfg.Jobs.CancelEndpoint(id); err != nil {
			s.cfg.Logger.Error("cancel the jobs of a deleted endpoint", "endpoint", id, "cancelled", n, "err", err)
		}
	}
	if s.cfg.EndpointDeleted != nil {
		s.cfg.EndpointDeleted(id)
	}
	return nil
}

// Endpoints reads one endpoint (id != "") or all, oldest first, and when
// withTemplates the templates by id.
func (s *Service) Endpoints(ctx context.Context, id string, withTemplates bool) ([]store.Endpoint, map[string]store.Template, error) {
	if err := live(ctx); err != nil {
		return nil, nil, err
	}
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
	if p := PrincipalFrom(ctx); p != nil && id == "" {
		// A list shows what the request's key may see (keys.go).
		eps = slices.DeleteFunc(eps, func(e store.Endpoint) bool { return !Visible(p, e.ID) })
	}
	for i := range eps {
		eps[i].Type = endpointType(&eps[i])
	}
	byCreated(eps, func(e store.Endpoint) time.Time { return e.CreatedAt }, func(e store.Endpoint) string { return e.ID })
	return eps, tmpl, err
}

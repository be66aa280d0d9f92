package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/queue"
	"berth/store"
)

// Management routes (/v1), RunPod REST v1 shapes. Errors are {"message"}.

// mgmtRoutes registers the /v1 management routes; admin wraps a handler
// with the API-key check and metrics under the given route name.
func (s *Server) mgmtRoutes(v1 *mux.Router, admin func(name string, h http.HandlerFunc) http.Handler) {
	const get, post, patch, del = http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete
	route := func(method, path, name string, h http.HandlerFunc) {
		v1.Handle(path, admin(name, h)).Methods(method)
	}
	route(get, "/openapi.json", "openapi", s.openapiDoc)

	route(post, "/templates", "templates.create", s.createTemplate)
	route(get, "/templates", "templates.list", s.listTemplates)
	route(get, "/templates/{templateId}", "templates.get", s.getTemplate)
	route(patch, "/templates/{templateId}", "templates.update", s.updateTemplate)
	route(post, "/templates/{templateId}/update", "templates.update", s.updateTemplate)
	route(del, "/templates/{templateId}", "templates.delete", s.deleteTemplate)

	route(post, "/endpoints", "endpoints.create", s.createEndpoint)
	route(get, "/endpoints", "endpoints.list", s.listEndpoints)
	route(get, "/endpoints/{endpointId}", "endpoints.get", s.getEndpoint)
	route(patch, "/endpoints/{endpointId}", "endpoints.update", s.updateEndpoint)
	route(post, "/endpoints/{endpointId}/update", "endpoints.update", s.updateEndpoint)
	route(del, "/endpoints/{endpointId}", "endpoints.delete", s.deleteEndpoint)

	route(post, "/pods", "pods.create", s.createPod)
	route(get, "/pods", "pods.list", s.listPods)
	route(get, "/pods/{podId}", "pods.get", s.getPod)
	route(patch, "/pods/{podId}", "pods.update", s.updatePod)
	route(post, "/pods/{podId}/update", "pods.update", s.updatePod)
	route(del, "/pods/{podId}", "pods.delete", s.deletePod)
	for _, a := range []string{"start", "stop", "reset", "restart"} {
		route(post, "/pods/{podId}/"+a, "pods."+a, s.podAction(a))
	}

	route(post, "/networkvolumes", "networkvolumes.create", s.createVolume)
	route(get, "/networkvolumes", "networkvolumes.list", s.listVolumes)
	route(get, "/networkvolumes/{networkVolumeId}", "networkvolumes.get", s.getVolume)
	route(patch, "/networkvolumes/{networkVolumeId}", "networkvolumes.update", s.updateVolume)
	route(post, "/networkvolumes/{networkVolumeId}/update", "networkvolumes.update", s.updateVolume)
	route(del, "/networkvolumes/{networkVolumeId}", "networkvolumes.delete", s.deleteVolume)

	route(post, "/containerregistryauth", "registryauth.create", s.createRegistryAuth)
	route(get, "/containerregistryauth", "registryauth.list", s.listRegistryAuths)
	route(get, "/containerregistryauth/{containerRegistryAuthId}", "registryauth.get", s.getRegistryAuth)
	route(del, "/containerregistryauth/{containerRegistryAuthId}", "registryauth.delete", s.deleteRegistryAuth)

	route(get, "/billing/pods", "billing.pods", s.billing(billPods))
	route(get, "/billing/endpoints", "billing.endpoints", s.billing(billEndpoints))
	route(get, "/billing/networkvolumes", "billing.networkvolumes", s.billing(billVolumes))
}

const maxMgmtBody = 1 << 20

// decodeStrict decodes a JSON object, refusing unknown fields so a typo in
// a field name is reported instead of silently ignored.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytesReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return bad("%s must be of type %s", ute.Field, ute.Type.String())
		}
		if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
			return bad("unknown field %s", strings.TrimPrefix(msg, "json: unknown field "))
		}
		return bad("request body must be a JSON object: %v", err)
	}
	if dec.More() {
		return bad("request body must hold one JSON object")
	}
	return nil
}

var portRe = regexp.MustCompile(`^([0-9]{1,5})/(http|tcp)$`)

// TemplateInput is TemplateCreateInput (and, with Category and
// IsServerless ignored, TemplateUpdateInput).
type TemplateInput struct {
	Name                    *string           `json:"name"`
	ImageName               *string           `json:"imageName"`
	Category                *string           `json:"category"`
	ContainerDiskInGb       *int              `json:"containerDiskInGb"`
	VolumeInGb              *int              `json:"volumeInGb"`
	VolumeMountPath         *string           `json:"volumeMountPath"`
	DockerEntrypoint        []string          `json:"dockerEntrypoint"`
	DockerStartCmd          []string          `json:"dockerStartCmd"`
	Env                     map[string]string `json:"env"`
	Ports                   *PortsField       `json:"ports"`
	Readme                  *string           `json:"readme"`
	IsPublic                *bool             `json:"isPublic"`
	IsServerless            *bool             `json:"isServerless"`
	ContainerRegistryAuthID *string           `json:"containerRegistryAuthId"`
}

// PortsField accepts RunPod's array form and the comma-joined string form
// its defaults and runpod-python use ("8888/http,22/tcp").
type PortsField []string

func (p *PortsField) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*p = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return bad("ports must be an array of \"<port>/<http|tcp>\" strings")
	}
	*p = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*p = append(*p, part)
		}
	}
	return nil
}

func validatePorts(ports []string) error {
	for _, p := range ports {
		m := portRe.FindStringSubmatch(p)
		if m == nil {
			return bad("ports entry %q must be <port>/<http|tcp>", p)
		}
		if n, _ := strconv.Atoi(m[1]); n < 1 || n > 65535 {
			return bad("ports entry %q: port must be 1-65535", p)
		}
	}
	return nil
}

// applyTemplate validates in and applies it to t.
func applyTemplate(t *store.Template, in TemplateInput, create bool) error {
	if in.Name != nil {
		if strings.TrimSpace(*in.Name) == "" {
			return bad("name must not be empty")
		}
		t.Name = *in.Name
	}
	if in.ImageName != nil {
		if strings.TrimSpace(*in.ImageName) == "" {
			return bad("imageName must not be empty")
		}
		t.ImageName = *in.ImageName
	}
	if create {
		if in.Name == nil {
			return bad("name is required")
		}
		if in.ImageName == nil {
			return bad("imageName is required")
		}
		if in.Category != nil {
			switch *in.Category {
			case "NVIDIA", "AMD", "CPU":
				t.Category = *in.Category
			default:
				return bad("category must be NVIDIA, AMD or CPU, got %q", *in.Category)
			}
		}
		if in.IsServerless != nil {
			t.IsServerless = *in.IsServerless
		}
	}
	for name, v := range map[string]*int{"containerDiskInGb": in.ContainerDiskInGb, "volumeInGb": in.VolumeInGb} {
		if v != nil && *v < 0 {
			return bad("%s must not be negative", name)
		}
	}
	if in.ContainerDiskInGb != nil {
		t.ContainerDiskInGb = *in.ContainerDiskInGb
	}
	if in.VolumeInGb != nil {
		t.VolumeInGb = *in.VolumeInGb
	}
	if in.VolumeMountPath != nil {
		if !path.IsAbs(*in.VolumeMountPath) {
			return bad("volumeMountPath must be an absolute path, got %q", *in.VolumeMountPath)
		}
		t.VolumeMountPath = *in.VolumeMountPath
	}
	if in.DockerEntrypoint != nil {
		t.DockerEntrypoint = in.DockerEntrypoint
	}
	if in.DockerStartCmd != nil {
		t.DockerStartCmd = in.DockerStartCmd
	}
	if in.Env != nil {
		if err := validateEnv(in.Env); err != nil {
			return err
		}
		t.Env = in.Env
	}
	if in.Ports != nil {
		if err := validatePorts(*in.Ports); err != nil {
			return err
		}
		t.Ports = append([]string{}, *in.Ports...)
	}
	if in.Readme != nil {
		t.Readme = *in.Readme
	}
	if in.IsPublic != nil {
		t.IsPublic = *in.IsPublic
	}
	if in.ContainerRegistryAuthID != nil {
		t.ContainerRegistryAuthID = *in.ContainerRegistryAuthID
	}
	return nil
}

func newTemplateDefaults() store.Template {
	return store.Template{
		Category: "NVIDIA", ContainerDiskInGb: 50, VolumeInGb: 20, VolumeMountPath: "/workspace",
		DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{},
		Ports: []string{"8888/http", "22/tcp"},
	}
}

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxMgmtBody)
	if !ok {
		return
	}
	var in TemplateInput
	if err := decodeStrict(body, &in); err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	t := newTemplateDefaults()
	if err := applyTemplate(&t, in, true); err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	t.ID = queue.NewID(10)
	t.CreatedAt = s.cfg.Clock.Now().UTC()
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if t.ContainerRegistryAuthID != "" && tx.GetRaw(store.RegistryAuths, t.ContainerRegistryAuthID) == nil {
			return bad("containerRegistryAuthId %q does not exist", t.ContainerRegistryAuthID)
		}
		var dup error
		tx.ForEach(store.Templates, func(_ string, raw []byte) error {
			var o store.Template
			if json.Unmarshal(raw, &o) == nil && o.Name == t.Name {
				dup = conflict("a template named %q already exists (%s)", t.Name, o.ID)
			}
			return nil
		})
		if dup != nil {
			return dup
		}
		return tx.Apply(store.Put(store.Templates, t.ID, t))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

type conflictErr struct{ msg string }

func (e conflictErr) Error() string { return e.msg }

func conflict(format string, a ...any) error { return conflictErr{fmt.Sprintf(format, a...)} }

type notFoundErr struct{ msg string }

func (e notFoundErr) Error() string { return e.msg }

func notFound(format string, a ...any) error { return notFoundErr{fmt.Sprintf(format, a...)} }

// mgmtErr answers err with its status: 400 for bad input, 404, 409, the
// runtime's statuses for pod actions, 500 for anything else.
func (s *Server) mgmtErr(w http.ResponseWriter, r *http.Request, err error) {
	var b badRequest
	var c conflictErr
	var nf notFoundErr
	switch {
	case errors.As(err, &b):
		writeErr(w, r, http.StatusBadRequest, b.msg)
	case errors.As(err, &c):
		writeErr(w, r, http.StatusConflict, c.msg)
	case errors.As(err, &nf):
		writeErr(w, r, http.StatusNotFound, nf.msg)
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, r, http.StatusNotFound, err.Error())
	default:
		if code, ok := runtimeStatus(err); ok {
			writeErr(w, r, code, err.Error())
			return
		}
		s.internal(w, r, err)
	}
}

// EndpointInput is EndpointCreateInput / EndpointUpdateInput.
type EndpointInput struct {
	Name                *string           `json:"name"`
	TemplateID          *string           `json:"templateId"`
	ComputeType         *string           `json:"computeType"`
	GPUTypeIDs          []string          `json:"gpuTypeIds"`
	GPUCount            *int              `json:"gpuCount"`
	CPUFlavorIDs        []string          `json:"cpuFlavorIds"`
	VCPUCount           *int              `json:"vcpuCount"`
	InstanceIDs         []string          `json:"instanceIds"`
	AllowedCudaVersions []string          `json:"allowedCudaVersions"`
	MinCudaVersion      *string           `json:"minCudaVersion"`
	DataCenterIDs       []string          `json:"dataCenterIds"`
	NetworkVolumeID     *string           `json:"networkVolumeId"`
	NetworkVolumeIDs    []string          `json:"networkVolumeIds"`
	IdleTimeout         *int              `json:"idleTimeout"`
	ScalerType          *string           `json:"scalerType"`
	ScalerValue         *int              `json:"scalerValue"`
	WorkersMin          *int              `json:"workersMin"`
	WorkersMax          *int              `json:"workersMax"`
	Flashboot           *bool             `json:"flashboot"`
	ExecutionTimeoutMs  *int64            `json:"executionTimeoutMs"`
	Env                 map[string]string `json:"env"`
}

// DataCenterID is the one data centre a Berth host is.
const DataCenterID = "BERTH-LOCAL"

func newEndpointDefaults() store.Endpoint {
	return store.Endpoint{
		ComputeType: "GPU", GPUCount: 1, VCPUCount: 2, IdleTimeout: 5, ScalerType: "QUEUE_DELAY", ScalerValue: 4,
		WorkersMin: 0, WorkersMax: 3, ExecutionTimeoutMs: queue.DefaultExecTimeout.Milliseconds(),
		GPUTypeIDs: []string{}, AllowedCudaVersions: []string{}, DataCenterIDs: []string{DataCenterID}, Env: map[string]string{},
	}
}

func applyEndpoint(e *store.Endpoint, in EndpointInput, create bool) error {
	if create {
		if in.TemplateID == nil || *in.TemplateID == "" {
			return bad("templateId is required")
		}
		if in.ComputeType != nil {
			switch *in.ComputeType {
			case "GPU", "CPU":
				e.ComputeType = *in.ComputeType
			default:
				return bad("computeType must be GPU or CPU, got %q", *in.ComputeType)
			}
		}
	}
	if in.Name != nil {
		e.Name = *in.Name
	}
	if in.TemplateID != nil {
		if *in.TemplateID == "" {
			return bad("templateId must not be empty")
		}
		e.TemplateID = *in.TemplateID
	}
	if in.GPUTypeIDs != nil {
		e.GPUTypeIDs = in.GPUTypeIDs
	}
	if in.GPUCount != nil {
		if *in.GPUCount < 1 {
			return bad("gpuCount must be at least 1, got %d", *in.GPUCount)
		}
		e.GPUCount = *in.GPUCount
	}
	if in.CPUFlavorIDs != nil {
		e.CPUFlavorIDs = in.CPUFlavorIDs
	}
	if in.VCPUCount != nil {
		if *in.VCPUCount < 1 {
			return bad("vcpuCount must be at least 1, got %d", *in.VCPUCount)
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
		for _, dc := range in.DataCenterIDs {
			if dc != DataCenterID {
				return bad("dataCenterIds: this Berth host is the one data centre %q, got %q", DataCenterID, dc)
			}
		}
		e.DataCenterIDs = in.DataCenterIDs
	}
	if in.NetworkVolumeID != nil {
		e.NetworkVolumeID = *in.NetworkVolumeID
	}
	if in.NetworkVolumeIDs != nil {
		e.NetworkVolumeIDs = in.NetworkVolumeIDs
	}
	if in.IdleTimeout != nil {
		if *in.IdleTimeout < 1 || *in.IdleTimeout > 3600 {
			return bad("idleTimeout must be 1-3600 seconds, got %d", *in.IdleTimeout)
		}
		e.IdleTimeout = *in.IdleTimeout
	}
	if in.ScalerType != nil {
		switch *in.ScalerType {
		case "QUEUE_DELAY", "REQUEST_COUNT":
			e.ScalerType = *in.ScalerType
		default:
			return bad("scalerType must be QUEUE_DELAY or REQUEST_COUNT, got %q", *in.ScalerType)
		}
	}
	if in.ScalerValue != nil {
		if *in.ScalerValue < 1 {
			return bad("scalerValue must be at least 1, got %d", *in.ScalerValue)
		}
		e.ScalerValue = *in.ScalerValue
	}
	if in.WorkersMin != nil {
		if *in.WorkersMin < 0 {
			return bad("workersMin must not be negative, got %d", *in.WorkersMin)
		}
		e.WorkersMin = *in.WorkersMin
	}
	if in.WorkersMax != nil {
		if *in.WorkersMax < 0 {
			return bad("workersMax must not be negative, got %d", *in.WorkersMax)
		}
		e.WorkersMax = *in.WorkersMax
	}
	if e.WorkersMin > e.WorkersMax {
		return bad("workersMin (%d) must not exceed workersMax (%d)", e.WorkersMin, e.WorkersMax)
	}
	if in.Flashboot != nil {
		e.Flashboot = *in.Flashboot
	}
	if in.ExecutionTimeoutMs != nil {
		d := time.Duration(*in.ExecutionTimeoutMs) * time.Millisecond
		if d < queue.MinExecutionTimeout || d > queue.MaxExecutionTimeout {
			return bad("executionTimeoutMs must be between %d and %d, got %d", queue.MinExecutionTimeout.Milliseconds(), queue.MaxExecutionTimeout.Milliseconds(), *in.ExecutionTimeoutMs)
		}
		e.ExecutionTimeoutMs = *in.ExecutionTimeoutMs
	}
	if in.Env != nil {
		if err := validateEnv(in.Env); err != nil {
			return err
		}
		e.Env = in.Env
	}
	return nil
}

func (s *Server) createEndpoint(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxMgmtBody)
	if !ok {
		return
	}
	var in EndpointInput
	if err := decodeStrict(body, &in); err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	e := newEndpointDefaults()
	if err := applyEndpoint(&e, in, true); err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	e.ID = queue.NewID(14)
	e.UserID = "berth"
	e.Version = 1
	e.CreatedAt = s.cfg.Clock.Now().UTC()
	if e.Name == "" {
		e.Name = e.ID
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := checkEndpointRefs(tx, &e); err != nil {
			return err
		}
		return tx.Apply(store.Put(store.Endpoints, e.ID, e))
	})
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	if s.cfg.EndpointChanged != nil {
		s.cfg.EndpointChanged(e.ID)
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) mustEndpoint(w http.ResponseWriter, r *http.Request, id string) (*store.Endpoint, bool) {
	e, err := s.endpoint(id)
	if errors.Is(err, store.ErrNotFound) {
		writeErr(w, r, http.StatusNotFound, "endpoint "+id+" not found")
		return nil, false
	}
	if err != nil {
		s.internal(w, r, err)
		return nil, false
	}
	return e, true
}

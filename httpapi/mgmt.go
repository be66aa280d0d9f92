package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"berth/mgmt"
	"berth/store"
)

// Management routes (/v1), RunPod REST v1 shapes. Errors are {"message"}.
// The rules live in package mgmt; these handlers decode v1's shapes, call
// it and encode its answers, mapping its errors in mgmtErr.

// mgmtRoutes registers the /v1 management routes; admin wraps a handler
// with the API-key check and metrics under the given route name.
func (s *Server) mgmtRoutes(v1 *mux.Router, admin func(name string, h http.HandlerFunc) http.Handler) {
	const get, post, patch, del = http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete
	route := func(method, path, name string, h http.HandlerFunc) {
		v1.Handle(path, admin(name, h)).Methods(method)
	}
	route(get, "/openapi.json", "openapi", s.openapiDoc)
	route(get, "/docs", "docs", s.docsPage)

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

	route(get, "/billing/pods", "billing.pods", s.billing(mgmt.BillPods))
	route(get, "/billing/endpoints", "billing.endpoints", s.billing(mgmt.BillEndpoints))
	route(get, "/billing/networkvolumes", "billing.networkvolumes", s.billing(mgmt.BillVolumes))
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

// TemplateInput is v1's TemplateCreateInput (and, with Category and
// IsServerless refused, TemplateUpdateInput).
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

func (in TemplateInput) mgmt() mgmt.TemplateInput {
	return mgmt.TemplateInput{
		Name: in.Name, ImageName: in.ImageName, Category: in.Category, ContainerDiskInGb: in.ContainerDiskInGb,
		VolumeInGb: in.VolumeInGb, VolumeMountPath: in.VolumeMountPath, DockerEntrypoint: in.DockerEntrypoint,
		DockerStartCmd: in.DockerStartCmd, Env: in.Env, Ports: in.Ports.list(), Readme: in.Readme,
		IsPublic: in.IsPublic, IsServerless: in.IsServerless, ContainerRegistryAuthID: in.ContainerRegistryAuthID,
	}
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
	*p = mgmt.SplitPorts(s)
	return nil
}

// list is the ports given, nil when none were (an empty list clears them).
func (p *PortsField) list() []string {
	if p == nil {
		return nil
	}
	return append([]string{}, *p...)
}

// EndpointInput is v1's EndpointCreateInput / EndpointUpdateInput.
type EndpointInput struct {
	Name                *string           `json:"name"`
	TemplateID          *string           `json:"templateId"`
	Type                *string           `json:"type"`
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

// v1's endpoint input has mgmt's fields one for one.
func (in EndpointInput) mgmt() mgmt.EndpointInput { return mgmt.EndpointInput(in) }

// DataCenterID is the one data centre a Berth host is.
const DataCenterID = mgmt.DataCenterID

// mgmtErr answers err with its status: a *mgmt.Error by its kind (400
// invalid or unsupported, 404, 409, 503), a decoding error 400, anything
// else 500.
func (s *Server) mgmtErr(w http.ResponseWriter, r *http.Request, err error) {
	var b badRequest
	var me *mgmt.Error
	switch {
	case errors.As(err, &b):
		writeErr(w, r, http.StatusBadRequest, b.msg)
	case errors.As(err, &me):
		writeErr(w, r, v1Status(me.Kind), me.Msg)
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, r, http.StatusNotFound, err.Error())
	default:
		s.internal(w, r, err)
	}
}

func v1Status(k mgmt.Kind) int {
	switch k {
	case mgmt.NotFound:
		return http.StatusNotFound
	case mgmt.Conflict:
		return http.StatusConflict
	case mgmt.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest // Invalid, Unsupported
}

// answer writes v with code, or err.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, code int, v any, err error) {
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	if code == http.StatusNoContent {
		noContent(w)
		return
	}
	writeJSON(w, code, v)
}

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	var in TemplateInput
	if !decodeBody(w, r, &in) {
		return
	}
	t, err := s.mg.CreateTemplate(r.Context(), in.mgmt())
	s.answer(w, r, http.StatusOK, t, err)
}

func (s *Server) createEndpoint(w http.ResponseWriter, r *http.Request) {
	var in EndpointInput
	if !decodeBody(w, r, &in) {
		return
	}
	e, err := s.mg.CreateEndpoint(r.Context(), in.mgmt())
	s.answer(w, r, http.StatusOK, e, err)
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

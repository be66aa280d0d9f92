package graphqlapi

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// Mutations: each decodes RunPod's input shape into a mgmt input and calls
// the one rule there. A refusal stores nothing (mgmt's transactions;
// saveEndpoint with an inline template is one mgmt operation).

type envInput struct {
	Key   string
	Value *string
}

// envMap turns [{key, value}] into a map; nil when not given.
func envMap(list *[]envInput) (map[string]string, error) {
	if list == nil {
		return nil, nil
	}
	m := make(map[string]string, len(*list))
	for _, e := range *list {
		if _, dup := m[e.Key]; dup {
			return nil, invalid("env", "env: %q is given twice", e.Key)
		}
		v := ""
		if e.Value != nil {
			v = *e.Value
		}
		m[e.Key] = v
	}
	return m, nil
}

func intp(v *int32) *int {
	if v == nil {
		return nil
	}
	n := int(*v)
	return &n
}

// given is nil for nil or "": the tools send "" for "not set".
func given(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}

// splitList splits a comma-joined list; "" is the empty list.
func splitList(s string) []string {
	ids := gpu.SplitIDs(s)
	if ids == nil {
		ids = []string{}
	}
	return ids
}

func refuseSet(field string, v *string, why string) error {
	if v != nil && *v != "" {
		return unsupported(field, "%s: %s", field, why)
	}
	return nil
}

// ---- templates ----

type portConfigInput struct{ Port, Name string }

type saveTemplateInput struct {
	ID                      *string
	Name                    *string
	ImageName               *string
	DockerArgs              *string
	ContainerDiskInGb       *int32
	VolumeInGb              *int32
	VolumeMountPath         *string
	Ports                   *string
	PortsConfig             *[]portConfigInput
	Env                     *[]envInput
	IsServerless            *bool
	IsPublic                *bool
	ContainerRegistryAuthId *string
	Readme                  *string
	Category                *string
	StartSsh                *bool
	StartJupyter            *bool
	StartScript             *string
	AdvancedStart           *bool
}

// templateInput decodes the fields SaveTemplateInput shares with
// EndpointTemplateInput.
func templateInput(dockerArgs *string, disk, volume *int32, mount, ports *string, env *[]envInput, auth *string) (mgmt.TemplateInput, error) {
	var in mgmt.TemplateInput
	if dockerArgs != nil {
		ep, cmd, err := parseDockerArgs(*dockerArgs)
		if err != nil {
			return in, err
		}
		in.DockerEntrypoint, in.DockerStartCmd = ep, cmd
	}
	in.ContainerDiskInGb, in.VolumeInGb = intp(disk), intp(volume)
	in.VolumeMountPath = given(mount)
	if ports != nil {
		in.Ports = mgmt.SplitPorts(*ports)
	}
	var err error
	if in.Env, err = envMap(env); err != nil {
		return in, err
	}
	in.ContainerRegistryAuthID = auth
	return in, nil
}

func (r *resolver) SaveTemplate(ctx context.Context, args struct{ Input *saveTemplateInput }) (*templateView, error) {
	a := args.Input
	if a == nil {
		return nil, invalid("input", "input is required")
	}
	if err := refuseSet("startScript", a.StartScript, "Berth runs the image's command; put the script in dockerArgs"); err != nil {
		return nil, err
	}
	in, err := templateInput(a.DockerArgs, a.ContainerDiskInGb, a.VolumeInGb, a.VolumeMountPath, a.Ports, a.Env, a.ContainerRegistryAuthId)
	if err != nil {
		return nil, err
	}
	in.Name, in.ImageName, in.IsPublic, in.Readme = a.Name, a.ImageName, a.IsPublic, a.Readme
	in.StartSSH, in.StartJupyter = a.StartSsh, a.StartJupyter
	if a.PortsConfig != nil {
		in.PortLabels = map[string]string{}
		for _, pc := range *a.PortsConfig {
			num, _, _ := strings.Cut(strings.TrimSpace(pc.Port), "/")
			if _, err := strconv.Atoi(num); err != nil {
				return nil, invalid("portsConfig", "portsConfig: port %q is not a port number", pc.Port)
			}
			if _, dup := in.PortLabels[num]; dup {
				return nil, invalid("portsConfig", "portsConfig: port %s is labelled twice", num)
			}
			in.PortLabels[num] = pc.Name
		}
	}
	if id := given(a.ID); id != nil {
		in.IsServerless, in.Category = a.IsServerless, a.Category
		t, err := r.mg().UpdateTemplate(ctx, *id, in)
		if err != nil {
			return nil, wrap(err)
		}
		return &templateView{t}, nil
	}
	in.IsServerless, in.Category = a.IsServerless, a.Category
	t, err := r.mg().CreateTemplate(ctx, in)
	if err != nil {
		return nil, wrap(err)
	}
	return &templateView{t}, nil
}

func (r *resolver) DeleteTemplate(ctx context.Context, args struct{ TemplateName, TemplateId *string }) (*bool, error) {
	id := given(args.TemplateId)
	if name := given(args.TemplateName); id == nil && name != nil {
		ts, err := r.mg().ListTemplates(ctx, mgmt.TemplateFilter{IncludeEndpointBound: true})
		if err != nil {
			return nil, wrap(err)
		}
		i := slices.IndexFunc(ts, func(t store.Template) bool { return t.Name == *name })
		if i < 0 {
			return nil, wrap(&mgmt.Error{Kind: mgmt.NotFound, Msg: "template named " + strconv.Quote(*name) + " not found"})
		}
		id = &ts[i].ID
	}
	if id == nil {
		return nil, invalid("templateName", "templateName (or templateId) is required")
	}
	if err := r.mg().DeleteTemplate(ctx, *id); err != nil {
		return nil, wrap(err)
	}
	return ptr(true), nil
}

// ---- endpoints ----

type endpointTemplateInput struct {
	Name                    string
	ImageName               *string
	ContainerDiskInGb       *int32
	DockerArgs              *string
	Env                     *[]envInput
	Ports                   *string
	VolumeInGb              *int32
	VolumeMountPath         *string
	ContainerRegistryAuthId *string
}

type endpointInput struct {
	ID               *string
	Name             *string
	TemplateId       *string
	Template         *endpointTemplateInput
	GpuIds           *string
	GpuCount         *int32
	InstanceIds      *[]string
	ComputeType      *string
	Type             *string
	NetworkVolumeId  *string
	NetworkVolumeIds *[]struct {
		NetworkVolumeId string
		DataCenterId    *string
	}
	Locations           *string
	IdleTimeout         *int32
	ScalerType          *string
	ScalerValue         *int32
	WorkersMin          *int32
	WorkersMax          *int32
	ExecutionTimeoutMs  *int32
	AllowedCudaVersions *string
	MinCudaVersion      *string
	FlashBootType       *string
	Flashboot           *bool
	Env                 *[]envInput
	HubReleaseId        *string
	ModelReferences     *[]string
}

func (a *endpointInput) mgmt(create bool) (mgmt.EndpointInput, error) {
	var in mgmt.EndpointInput
	if err := refuseSet("hubReleaseId", a.HubReleaseId, "the RunPod Hub is not available on Berth; create a template with the image and an endpoint from it"); err != nil {
		return in, err
	}
	if a.ModelReferences != nil {
		in.ModelReferences = append([]string{}, *a.ModelReferences...) // [] clears (runpodctl's --clear-models)
	}
	in.Name, in.TemplateID, in.MinCudaVersion, in.ScalerType = a.Name, given(a.TemplateId), given(a.MinCudaVersion), a.ScalerType
	// "" is not given: runpodctl sends the gpuIds it read, "" when its
	// REST read had none, and must not clear an endpoint's GPU types.
	if g := given(a.GpuIds); g != nil {
		in.GPUTypeIDs = splitList(*g)
	}
	in.GPUCount, in.IdleTimeout, in.ScalerValue = intp(a.GpuCount), intp(a.IdleTimeout), intp(a.ScalerValue)
	in.WorkersMin, in.WorkersMax = intp(a.WorkersMin), intp(a.WorkersMax)
	if a.ExecutionTimeoutMs != nil {
		ms := int64(*a.ExecutionTimeoutMs)
		in.ExecutionTimeoutMs = &ms
	}
	if a.InstanceIds != nil {
		in.InstanceIDs = *a.InstanceIds
	}
	in.ComputeType, in.Type = a.ComputeType, a.Type // mgmt takes instanceIds alone for a CPU endpoint
	// "" is how runpod-python says "no network volume": none on create,
	// detached on update.
	in.NetworkVolumeID = a.NetworkVolumeId
	if a.NetworkVolumeIds != nil {
		in.NetworkVolumeIDs = []string{}
		for _, v := range *a.NetworkVolumeIds {
			in.NetworkVolumeIDs = append(in.NetworkVolumeIDs, v.NetworkVolumeId)
		}
	}
	if l := given(a.Locations); l != nil {
		dcs, err := locations(*l)
		if err != nil {
			return in, err
		}
		in.DataCenterIDs = dcs
	}
	if c := given(a.AllowedCudaVersions); c != nil {
		in.AllowedCudaVersions = splitList(*c)
	}
	if a.FlashBootType != nil {
		in.Flashboot = ptr(*a.FlashBootType == "FLASHBOOT")
	}
	if a.Flashboot != nil {
		if in.Flashboot != nil && *in.Flashboot != *a.Flashboot {
			return in, invalid("flashboot", "flashboot and flashBootType disagree")
		}
		in.Flashboot = a.Flashboot
	}
	if create && in.Flashboot == nil && a.Name != nil && strings.HasSuffix(*a.Name, "-fb") {
		// RunPod's older convention, still in its GraphQL examples: a
		// name ending in -fb turns FlashBoot on.
		in.Flashboot = ptr(true)
	}
	var err error
	in.Env, err = envMap(a.Env)
	return in, err
}

// endpoint is the view of one endpoint just saved.
func (r *resolver) endpoint(ctx context.Context, e store.Endpoint) (*endpointView, error) {
	noteWarnings(ctx, "endpoint "+e.ID, renameWarnings(e.Warnings, endpointFields))
	sn, err := r.mg().Snapshot(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	return &endpointView{e, &sn, r.cfg.Workers, r.cfg.Models}, nil
}

// SaveEndpoint creates an endpoint (from templateId, or an inline
// template made with it) or updates the one named by id.
// endpointFields are mgmt's names of saveEndpoint's fields.
var endpointFields = map[string]string{"gpuTypeIds": "gpuIds", "dataCenterIds": "locations"}

func (r *resolver) SaveEndpoint(ctx context.Context, args struct{ Input *endpointInput }) (*endpointView, error) {
	v, err := r.saveEndpoint(ctx, args.Input)
	return v, wrap(renamed(err, endpointFields))
}

func (r *resolver) saveEndpoint(ctx context.Context, a *endpointInput) (*endpointView, error) {
	if a == nil {
		return nil, invalid("input", "input is required")
	}
	id := given(a.ID)
	idv := ""
	if id != nil {
		idv = *id
	}
	if err := allowEndpoint(ctx, idv, "saveEndpoint"); err != nil { // access.go
		return nil, err
	}
	in, err := a.mgmt(id == nil)
	if err != nil {
		return nil, err
	}
	if id != nil {
		if a.Template != nil {
			return nil, invalid("template", "template: an inline template is only for a new endpoint; save the template with saveTemplate")
		}
		e, err := r.mg().UpdateEndpoint(ctx, *id, in)
		if err != nil {
			return nil, wrap(err)
		}
		return r.endpoint(ctx, e)
	}
	if a.Template == nil {
		e, err := r.mg().CreateEndpoint(ctx, in)
		if err != nil {
			return nil, wrap(err)
		}
		return r.endpoint(ctx, e)
	}
	if in.TemplateID != nil {
		return nil, invalid("template", "give templateId or template, not both")
	}
	t := a.Template
	tin, err := templateInput(t.DockerArgs, t.ContainerDiskInGb, t.VolumeInGb, t.VolumeMountPath, t.Ports, t.Env, t.ContainerRegistryAuthId)
	if err != nil {
		return nil, err
	}
	tin.Name, tin.ImageName = &t.Name, t.ImageName
	// The endpoint and its template in one mgmt operation (one
	// transaction): a refusal of either stores neither.
	e, err := r.mg().CreateEndpointWith(ctx, in, mgmt.EndpointOptions{Template: &tin})
	if err != nil {
		return nil, wrap(err)
	}
	return r.endpoint(ctx, e)
}

func (r *resolver) UpdateEndpointTemplate(ctx context.Context, args struct {
	Input *struct{ EndpointId, TemplateId string }
}) (*endpointView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {endpointId, templateId} is required")
	}
	if err := allowEndpoint(ctx, args.Input.EndpointId, "updateEndpointTemplate"); err != nil {
		return nil, err
	}
	e, err := r.mg().UpdateEndpoint(ctx, args.Input.EndpointId, mgmt.EndpointInput{TemplateID: &args.Input.TemplateId})
	if err != nil {
		return nil, wrap(err)
	}
	return r.endpoint(ctx, e)
}

func (r *resolver) DeleteEndpoint(ctx context.Context, args struct{ ID string }) (*bool, error) {
	if err := allowEndpoint(ctx, args.ID, "deleteEndpoint"); err != nil {
		return nil, err
	}
	if err := r.mg().DeleteEndpoint(ctx, args.ID); err != nil {
		return nil, wrap(err)
	}
	return ptr(true), nil
}

// ---- registry auths ----

func (r *resolver) SaveRegistryAuth(ctx context.Context, args struct {
	Input *struct{ Name, Username, Password *string }
}) (*registryAuthView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {name, username, password} is required")
	}
	a, err := r.mg().CreateRegistryAuth(ctx, mgmt.RegistryAuthInput{Name: args.Input.Name, Username: args.Input.Username, Password: args.Input.Password})
	if err != nil {
		return nil, wrap(err)
	}
	return viewRegistryAuth(a), nil
}

func (r *resolver) UpdateRegistryAuth(ctx context.Context, args struct {
	Input *struct {
		ID                 string
		Username, Password *string
	}
}) (*registryAuthView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {id, username, password} is required")
	}
	a, err := r.mg().UpdateRegistryAuth(ctx, args.Input.ID, mgmt.RegistryAuthInput{Username: args.Input.Username, Password: args.Input.Password})
	if err != nil {
		return nil, wrap(err)
	}
	return viewRegistryAuth(a), nil
}

func (r *resolver) DeleteRegistryAuth(ctx context.Context, args struct{ RegistryAuthId string }) (*bool, error) {
	if err := r.mg().DeleteRegistryAuth(ctx, args.RegistryAuthId); err != nil {
		return nil, wrap(err)
	}
	return ptr(true), nil
}

// ---- user ----

func (r *resolver) UpdateUserSettings(ctx context.Context, args struct{ Input *struct{ PubKey *string } }) (*userView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {pubKey} is required")
	}
	if args.Input.PubKey == nil {
		return r.Myself(ctx)
	}
	// pubKey holds the keys one per line (runpodctl separates them with
	// blank lines); they are the account's SSH keys of REST v2 too.
	var keys []string
	for line := range strings.SplitSeq(*args.Input.PubKey, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			keys = append(keys, line)
		}
	}
	keys, err := r.mg().SetSSHKeys(ctx, keys)
	if err != nil {
		return nil, wrap(renamed(err, map[string]string{"keys": "pubKey"}))
	}
	return &userView{r: r, keys: keys}, nil
}

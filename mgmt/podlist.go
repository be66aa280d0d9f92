package mgmt

import (
	"context"
	"slices"
	"time"

	"berth/store"
)

// PodFilter narrows ListPods (and, in an adapter, the serverless workers
// shown as pods). Empty fields match everything; a list matches when any
// of its values is among the pod's.
type PodFilter struct {
	ComputeType     string // "", GPU or CPU
	DesiredStatus   string // "", RUNNING, EXITED or TERMINATED
	EndpointID      string
	ID              string
	ImageName       string
	Name            string
	NetworkVolumeID string
	TemplateID      string
	CPUFlavorIDs    []string
	DataCenterIDs   []string
	GPUTypeIDs      []string
}

// Check refuses filter values no pod can have the shape of.
func (f PodFilter) Check() error {
	if err := oneOf("computeType", emptyNil(f.ComputeType), []string{"GPU", "CPU"}, new(string)); err != nil {
		return err
	}
	return oneOf("desiredStatus", emptyNil(f.DesiredStatus), []string{store.PodRunning, store.PodExited, store.PodTerminated}, new(string))
}

func emptyNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// PodFacts are what a PodFilter looks at, of a pod or a worker.
type PodFacts struct {
	ComputeType, DesiredStatus, EndpointID, ID, ImageName, Name, NetworkVolumeID, TemplateID string
	CPUFlavorIDs, DataCenterIDs, GPUTypeIDs                                                  []string
}

// FactsOf is a pod's PodFacts: its GPU type once it has one, else those
// asked for.
func FactsOf(p store.Pod) PodFacts {
	gpus := p.GPUTypeIDs
	if p.GPU != nil {
		gpus = []string{p.GPU.ID}
	}
	return PodFacts{ComputeType: p.ComputeType, DesiredStatus: p.DesiredStatus, ID: p.ID, ImageName: p.ImageName,
		Name: p.Name, NetworkVolumeID: p.NetworkVolumeID, TemplateID: p.TemplateID, CPUFlavorIDs: p.CPUFlavorIDs,
		DataCenterIDs: dataCentersOf(p.DataCenterIDs), GPUTypeIDs: gpus}
}

// dataCentersOf is where a record runs: the ids it was given, and this
// host's own.
func dataCentersOf(ids []string) []string {
	if slices.Contains(ids, DataCenterID) {
		return ids
	}
	return append(slices.Clone(ids), DataCenterID)
}

// Matches reports whether p passes f.
func (f PodFilter) Matches(p PodFacts) bool {
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
	return eq(f.ComputeType, p.ComputeType) && eq(f.DesiredStatus, p.DesiredStatus) && eq(f.EndpointID, p.EndpointID) &&
		eq(f.ID, p.ID) && eq(f.ImageName, p.ImageName) && eq(f.Name, p.Name) && eq(f.NetworkVolumeID, p.NetworkVolumeID) &&
		eq(f.TemplateID, p.TemplateID) && anyOf(f.CPUFlavorIDs, p.CPUFlavorIDs) && anyOf(f.GPUTypeIDs, p.GPUTypeIDs) &&
		anyOf(f.DataCenterIDs, p.DataCenterIDs)
}

// EndpointFacts are the PodFacts of an endpoint's worker before the
// runtime's view (GPU, image, state) is added.
func EndpointFacts(e store.Endpoint) PodFacts {
	return PodFacts{ComputeType: e.ComputeType, EndpointID: e.ID, NetworkVolumeID: e.NetworkVolumeID, TemplateID: e.TemplateID,
		CPUFlavorIDs: e.CPUFlavorIDs, DataCenterIDs: dataCentersOf(e.DataCenterIDs), GPUTypeIDs: e.GPUTypeIDs}
}

// Snapshot is every management record, read in one transaction; lists are
// oldest first.
type Snapshot struct {
	Pods          []store.Pod
	Endpoints     []store.Endpoint
	Templates     map[string]store.Template
	Volumes       map[string]store.NetworkVolume
	RegistryAuths []RegistryAuth
}

// Snapshot reads every management record at once (for lists with
// includes and filters).
func (s *Service) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := live(ctx); err != nil {
		return Snapshot{}, err
	}
	var sn Snapshot
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if sn.Pods, err = all[store.Pod](tx, store.Pods); err != nil {
			return err
		}
		if sn.Endpoints, err = all[store.Endpoint](tx, store.Endpoints); err != nil {
			return err
		}
		ts, err := all[store.Template](tx, store.Templates)
		if err != nil {
			return err
		}
		vs, err := all[store.NetworkVolume](tx, store.Volumes)
		if err != nil {
			return err
		}
		as, err := all[store.RegistryAuth](tx, store.RegistryAuths)
		if err != nil {
			return err
		}
		sn.Templates = ByID(ts, func(t store.Template) string { return t.ID })
		sn.Volumes = ByID(vs, func(v store.NetworkVolume) string { return v.ID })
		for _, a := range as {
			sn.RegistryAuths = append(sn.RegistryAuths, viewRegistryAuth(a))
		}
		return nil
	})
	byCreated(sn.Pods, func(p store.Pod) time.Time { return p.CreatedAt }, func(p store.Pod) string { return p.ID })
	for i := range sn.Pods {
		s.withProgress(&sn.Pods[i])
	}
	byCreated(sn.Endpoints, func(e store.Endpoint) time.Time { return e.CreatedAt }, func(e store.Endpoint) string { return e.ID })
	byCreated(sn.RegistryAuths, func(a RegistryAuth) time.Time { return a.CreatedAt }, func(a RegistryAuth) string { return a.ID })
	return sn, err
}

// ListPods lists the pods f selects, oldest first.
func (s *Service) ListPods(ctx context.Context, f PodFilter) ([]store.Pod, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out := []store.Pod{}
	for _, p := range sn.Pods {
		if f.Matches(FactsOf(p)) {
			out = append(out, p)
		}
	}
	return out, nil
}

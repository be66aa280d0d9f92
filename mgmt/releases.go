package mgmt

import (
	"context"
	"maps"
	"slices"
	"strings"

	"berth/store"
)

// A release is a recorded endpoint version: every change that bumps an
// endpoint's version (and so rolls its workers) stores one, with the
// fields that changed.

func releaseOp(e store.Endpoint, at store.Release) store.Op {
	at.EndpointID, at.Version = e.ID, e.Version
	if at.Diff == nil {
		at.Diff = []store.ReleaseDiff{}
	}
	return store.Put(store.Releases, store.ReleaseKey(e.ID, e.Version), at)
}

// endpointDiff lists the rolling fields that differ between a and b.
func endpointDiff(a, b store.Endpoint) []store.ReleaseDiff {
	var d []store.ReleaseDiff
	add := func(field string, old, new any, same bool) {
		if !same {
			d = append(d, store.ReleaseDiff{Field: field, Old: old, New: new})
		}
	}
	add("templateId", a.TemplateID, b.TemplateID, a.TemplateID == b.TemplateID)
	add("env", a.Env, b.Env, maps.Equal(a.Env, b.Env))
	add("gpuTypeIds", a.GPUTypeIDs, b.GPUTypeIDs, slices.Equal(a.GPUTypeIDs, b.GPUTypeIDs))
	add("gpuCount", a.GPUCount, b.GPUCount, a.GPUCount == b.GPUCount)
	add("vcpuCount", a.VCPUCount, b.VCPUCount, a.VCPUCount == b.VCPUCount)
	add("cpuFlavorIds", a.CPUFlavorIDs, b.CPUFlavorIDs, slices.Equal(a.CPUFlavorIDs, b.CPUFlavorIDs))
	add("instanceIds", a.InstanceIDs, b.InstanceIDs, slices.Equal(a.InstanceIDs, b.InstanceIDs))
	add("networkVolumeId", a.NetworkVolumeID, b.NetworkVolumeID, a.NetworkVolumeID == b.NetworkVolumeID)
	add("networkVolumeIds", a.NetworkVolumeIDs, b.NetworkVolumeIDs, slices.Equal(a.NetworkVolumeIDs, b.NetworkVolumeIDs))
	add("modelReferences", a.ModelReferences, b.ModelReferences, slices.Equal(a.ModelReferences, b.ModelReferences))
	return d
}

// templateDiff lists the container fields that differ, as "template.<field>".
func templateDiff(a, b store.Template) []store.ReleaseDiff {
	var d []store.ReleaseDiff
	add := func(field string, old, new any, same bool) {
		if !same {
			d = append(d, store.ReleaseDiff{Field: "template." + field, Old: old, New: new})
		}
	}
	add("imageName", a.ImageName, b.ImageName, a.ImageName == b.ImageName)
	add("env", a.Env, b.Env, maps.Equal(a.Env, b.Env))
	add("dockerEntrypoint", a.DockerEntrypoint, b.DockerEntrypoint, slices.Equal(a.DockerEntrypoint, b.DockerEntrypoint))
	add("dockerStartCmd", a.DockerStartCmd, b.DockerStartCmd, slices.Equal(a.DockerStartCmd, b.DockerStartCmd))
	add("ports", a.Ports, b.Ports, slices.Equal(a.Ports, b.Ports))
	add("containerDiskInGb", a.ContainerDiskInGb, b.ContainerDiskInGb, a.ContainerDiskInGb == b.ContainerDiskInGb)
	add("volumeInGb", a.VolumeInGb, b.VolumeInGb, a.VolumeInGb == b.VolumeInGb)
	add("volumeMountPath", a.VolumeMountPath, b.VolumeMountPath, a.VolumeMountPath == b.VolumeMountPath)
	add("containerRegistryAuthId", a.ContainerRegistryAuthID, b.ContainerRegistryAuthID, a.ContainerRegistryAuthID == b.ContainerRegistryAuthID)
	return d
}

// Releases lists endpoint id's releases, oldest first. An endpoint made
// before Berth recorded releases shows its current version, dated at the
// endpoint's creation.
func (s *Service) Releases(ctx context.Context, id string) ([]store.Release, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var out []store.Release
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var e store.Endpoint
		if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
			return err
		}
		rs, err := all[store.Release](tx, store.Releases)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.EndpointID == id {
				out = append(out, r)
			}
		}
		if !slices.ContainsFunc(out, func(r store.Release) bool { return r.Version == e.Version }) {
			out = append(out, store.Release{EndpointID: id, Version: e.Version, CreatedAt: e.CreatedAt, Diff: []store.ReleaseDiff{}})
		}
		return nil
	})
	slices.SortFunc(out, func(a, b store.Release) int { return a.Version - b.Version })
	return out, err
}

// deleteReleases removes endpoint id's releases.
func deleteReleases(tx *store.Tx, id string) ([]store.Op, error) {
	var ops []store.Op
	err := tx.ForEach(store.Releases, func(key string, _ []byte) error {
		if strings.HasPrefix(key, id+"/") {
			ops = append(ops, store.Delete(store.Releases, key))
		}
		return nil
	})
	return ops, err
}

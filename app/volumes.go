package app

import (
	"context"
	"errors"

	"berth/mgmt"
	"berth/runtime"
)

// mgmtVolumes gives mgmt the runtime's network volumes (a.volumes: the
// backend's, or the host directories when no runtime runs), and says once
// what the runtime's errors are to the API.
type mgmtVolumes struct{ r runtime.Volumes }

func (v mgmtVolumes) Create(ctx context.Context, id string, sizeGB int) (mgmt.VolumeView, error) {
	st, err := v.r.CreateVolume(ctx, id, sizeGB)
	return view(st), err
}

// Grow: the runtime's refusal (a storage class that does not let a claim
// grow, a claim not bound) is the request's, a 400 on size saying why;
// any other error is the runtime's state, a 503.
func (v mgmtVolumes) Grow(ctx context.Context, id string, sizeGB int) error {
	err := v.r.GrowVolume(ctx, id, sizeGB)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, runtime.ErrRefused):
		return mgmt.InvalidInput("size", "%v", err)
	}
	return &mgmt.Error{Kind: mgmt.Unavailable, Msg: "cannot grow the volume now: " + err.Error(), Err: err}
}

func (v mgmtVolumes) SetAside(id string) error { return v.r.SetAsideVolume(id) }
func (v mgmtVolumes) Restore(id string) error  { return v.r.RestoreVolume(id) }
func (v mgmtVolumes) Remove(ctx context.Context, id string) error {
	return v.r.RemoveVolume(ctx, id)
}
func (v mgmtVolumes) View(id string) mgmt.VolumeView { return view(v.r.VolumeStatus(id)) }

func view(st runtime.VolumeStatus) mgmt.VolumeView {
	out := mgmt.VolumeView{UsedBytes: st.UsedBytes, Path: st.Path}
	if c := st.Claim; c != nil {
		out.Claim = &mgmt.VolumeClaim{Name: c.Name, Status: c.Phase, Reason: c.Reason}
	}
	return out
}

// registryAuthDeleted removes what the backend keeps of a deleted
// registry login (a Kubernetes pull Secret).
func (a *App) registryAuthDeleted(ctx context.Context, id string) error {
	if a.backend == nil {
		return nil
	}
	return a.backend.RemoveRegistryAuth(ctx, id)
}

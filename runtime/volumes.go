package runtime

import "context"

// Volumes keeps the network volumes' data where instances mount them: a
// host directory per volume (Docker, and Berth with no runtime: package
// runtime/voldirs) or a PersistentVolumeClaim (Kubernetes). Management
// (mgmt, through app) decides when; the runtime owns what and where.
//
// A deletion is in three steps so that nothing acknowledged is lost:
// SetAsideVolume while the record's deletion is being stored (quick, and
// undone by RestoreVolume should the store refuse), RemoveVolume once it
// is stored. Storage that does not exist is not an error for any step.
type Volumes interface {
	// CreateVolume makes volume id's storage, sizeGB big, before its
	// record is stored (RemoveVolume undoes it should the store refuse),
	// and says what it made. A runtime that makes it when first mounted
	// does nothing here.
	CreateVolume(ctx context.Context, id string, sizeGB int) (VolumeStatus, error)
	// GrowVolume grows volume id's storage to sizeGB before the size is
	// stored. An error matching ErrRefused is the request's (the cluster
	// will not grow it so); any other, the runtime's state.
	GrowVolume(ctx context.Context, id string, sizeGB int) error
	// SetAsideVolume takes volume id's storage out of reach while its
	// record's deletion is stored; RestoreVolume puts it back.
	SetAsideVolume(id string) error
	RestoreVolume(id string) error
	// RemoveVolume deletes volume id's data, set aside or not.
	RemoveVolume(ctx context.Context, id string) error
	// VolumeStatus is what the runtime knows of volume id, without a
	// request to a remote API (cached where measuring is costly).
	VolumeStatus(id string) VolumeStatus
}

// VolumeStatus is a network volume as the runtime has it.
type VolumeStatus struct {
	// UsedBytes are the bytes its files hold, where the runtime measures
	// them (host directories); 0 otherwise.
	UsedBytes int64
	// Path is its host directory, "" where it has none.
	Path string
	// Claim is its claim on a cluster once one was made (Kubernetes makes
	// it when a worker or pod first mounts the volume); nil otherwise.
	Claim *ClaimStatus
}

// ClaimStatus is a volume's claim as the cluster has it.
type ClaimStatus struct {
	Name  string
	Phase string // Pending, Bound, Lost
	// Reason says why a claim that is not bound is not.
	Reason string
}

package mgmt

import (
	"errors"

	"berth/store"
)

// Errors a container log source (the runtime, as the composition wires it)
// wraps when there is no such container; every surface answers them 404.
var (
	ErrNoSuchWorker = errors.New("no container for this worker")
	ErrNoSuchPod    = errors.New("no container for this pod")
)

// containerInput is what a pod and a template both say about the
// container they run: its name, image, command, environment, ports, disks
// and registry login. nil is not given. One rule set (applyContainer), so
// a template's container is one a pod accepts and the other way round.
type containerInput struct {
	Name, ImageName                  *string
	DockerEntrypoint, DockerStartCmd []string
	Env                              map[string]string
	Ports                            []string
	ContainerDiskInGb, VolumeInGb    *int
	VolumeMountPath                  *string
	ContainerRegistryAuthID          *string
}

// containerFields points at a record's container fields (podContainer,
// templateContainer).
type containerFields struct {
	Name, ImageName                  *string
	DockerEntrypoint, DockerStartCmd *[]string
	Env                              *map[string]string
	Ports                            *[]string
	ContainerDiskInGb, VolumeInGb    *int
	VolumeMountPath                  *string
	ContainerRegistryAuthID          *string
}

func podContainer(p *store.Pod) containerFields {
	return containerFields{&p.Name, &p.ImageName, &p.DockerEntrypoint, &p.DockerStartCmd, &p.Env, &p.Ports,
		&p.ContainerDiskInGb, &p.VolumeInGb, &p.VolumeMountPath, &p.ContainerRegistryAuthID}
}

func templateContainer(t *store.Template) containerFields {
	return containerFields{&t.Name, &t.ImageName, &t.DockerEntrypoint, &t.DockerStartCmd, &t.Env, &t.Ports,
		&t.ContainerDiskInGb, &t.VolumeInGb, &t.VolumeMountPath, &t.ContainerRegistryAuthID}
}

// applyContainer validates in and applies the fields given to to. On an
// error to may hold some of in: callers apply to a copy.
func applyContainer(in containerInput, to containerFields) error {
	if in.Name != nil {
		if err := checkName(*in.Name); err != nil {
			return err
		}
		*to.Name = *in.Name
	}
	if in.ImageName != nil {
		if err := checkImage(*in.ImageName); err != nil {
			return err
		}
		*to.ImageName = *in.ImageName
	}
	if in.DockerEntrypoint != nil {
		if err := checkCmd("dockerEntrypoint", in.DockerEntrypoint); err != nil {
			return err
		}
		*to.DockerEntrypoint = in.DockerEntrypoint
	}
	if in.DockerStartCmd != nil {
		if err := checkCmd("dockerStartCmd", in.DockerStartCmd); err != nil {
			return err
		}
		*to.DockerStartCmd = in.DockerStartCmd
	}
	if in.Env != nil {
		if err := validateEnv(in.Env); err != nil {
			return err
		}
		*to.Env = in.Env
	}
	if in.Ports != nil {
		if err := validatePorts(in.Ports); err != nil {
			return err
		}
		*to.Ports = append([]string{}, in.Ports...)
	}
	if err := applyDisks(in.ContainerDiskInGb, in.VolumeInGb, in.VolumeMountPath, to.ContainerDiskInGb, to.VolumeInGb, to.VolumeMountPath); err != nil {
		return err
	}
	if in.ContainerRegistryAuthID != nil {
		if *in.ContainerRegistryAuthID != "" {
			if err := checkID("containerRegistryAuthId", *in.ContainerRegistryAuthID); err != nil {
				return err
			}
		}
		*to.ContainerRegistryAuthID = *in.ContainerRegistryAuthID
	}
	return nil
}

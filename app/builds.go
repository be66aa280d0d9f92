package app

import (
	"context"
	"errors"
	"io"
	"path/filepath"

	"berth/builder"
	"berth/runtime/docker"
)

// newBuilder makes the image builder: the Docker daemon Berth runs
// workers on builds; without one (no daemon, the Kubernetes runtime) a
// build is refused saying why.
func (a *App) newBuilder() *builder.Service {
	bc := a.cfg.Builds
	bc.Records, bc.Logger = a.mg, a.log.With("component", "builder")
	// Git sources obey the webhooks' outbound policy (--webhook-allow).
	bc.Outbound = a.hooks
	bc.Dir = filepath.Join(a.cfg.DataDir, "builds")
	switch {
	case a.dock != nil:
		bc.Images = dockerImages{a.dock}
	case a.cfg.Kubernetes != nil:
		bc.NoImages = errors.New("the Kubernetes runtime has no image builder yet (docs/builds.md)")
	case a.noRuntime != nil:
		bc.NoImages = a.noRuntime
	default:
		bc.NoImages = errors.New("Docker is off")
	}
	return builder.New(bc)
}

// dockerImages builds on the Docker daemon.
type dockerImages struct{ d *docker.Docker }

func (i dockerImages) ImageExists(ctx context.Context, ref string) (bool, error) {
	return i.d.ImageExists(ctx, ref)
}

func (i dockerImages) Build(ctx context.Context, contextTar io.Reader, s builder.Spec, line func(string)) error {
	return i.d.BuildImage(ctx, contextTar, docker.BuildSpec{Tag: s.Tag, Dockerfile: s.Dockerfile, Target: s.Target,
		BuildArgs: s.BuildArgs, Labels: s.Labels}, line)
}

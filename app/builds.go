package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"berth/builder"
	"berth/builder/buildkit"
	"berth/mgmt"
	"berth/runtime"
	"berth/runtime/docker"
	"berth/store"
)

// newBuilder makes the image builder: the Docker daemon Berth runs
// workers on builds. On the Kubernetes runtime the cluster's nodes cannot
// see that daemon's images: builds need a registry (Builds.Registry) they
// are pushed to, and a Docker daemon reachable from Berth to build with.
// Without a builder a build is refused saying why.
func (a *App) newBuilder() *builder.Service {
	bc := a.cfg.Builds
	bc.Records, bc.Logger = a.mg, a.log.With("component", "builder")
	// Git sources obey the webhooks' outbound policy (--webhook-allow).
	bc.Outbound = a.hooks
	bc.Dir = filepath.Join(a.cfg.DataDir, "builds")
	switch {
	case a.cfg.BuildkitAddr != "" && a.cfg.Backend.kind == kubernetes && bc.Registry == "":
		bc.NoImages = errors.New("builds on the Kubernetes runtime need a registry (berth serve --registry HOST[/PREFIX]) for BuildKit to push to (docs/builds.md)")
	case a.cfg.BuildkitAddr != "" && bc.Registry == "" && a.dock == nil:
		bc.NoImages = errors.New("BuildKit builds without --registry are loaded into the Docker daemon workers run on: the Docker runtime is off")
	case a.cfg.BuildkitAddr != "":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		bk, err := buildkit.Connect(ctx, a.cfg.BuildkitAddr)
		cancel()
		if err != nil {
			bc.NoImages = fmt.Errorf("builds need the BuildKit daemon (--buildkit-addr): %w", err)
			break
		}
		a.closers = append(a.closers, func() { bk.Close() })
		if bc.Registry != "" {
			bc.Direct = buildkitImages{bk}
		} else {
			bc.Images = buildkitLoad{bk: bk, d: a.dock}
		}
	case a.cfg.Backend.kind == kubernetes && bc.Registry == "":
		bc.NoImages = errors.New("builds on the Kubernetes runtime need a registry (berth serve --registry HOST[/PREFIX]): the cluster's nodes cannot see the images of the daemon that builds them (docs/builds.md)")
	case a.cfg.Backend.kind == kubernetes:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		dock, err := docker.Connect(ctx, a.log.With("component", "builder"))
		cancel()
		if err != nil {
			bc.NoImages = fmt.Errorf("builds need a Docker daemon to build with: %w", err)
			break
		}
		a.closers = append(a.closers, func() { dock.Close() })
		bc.Images, bc.Remover = dockerImages{dock}, dockerImages{dock}
	case a.dock != nil:
		bc.Images, bc.Remover = dockerImages{a.dock}, dockerImages{a.dock}
	case a.noRuntime != nil:
		bc.NoImages = fmt.Errorf("builds need the Docker runtime: %w", a.noRuntime)
	default:
		bc.NoImages = errors.New("builds need the Docker runtime: Docker is off")
	}
	if a.backend != nil {
		// The images of the runtime's containers (or Pods) are never
		// pruned.
		bc.InUseImages = func(ctx context.Context) ([]string, error) {
			list, err := a.backend.List(ctx)
			imgs := make([]string, 0, len(list))
			for _, in := range list {
				imgs = append(imgs, in.Image)
			}
			return imgs, err
		}
	}
	bc.OnPrune = a.metrics.BuildImagePruned
	if a.sup != nil {
		bc.Tester = a.tests
	} else {
		bc.NoTester = errors.New("no container runtime runs workers")
	}
	return builder.New(bc)
}

// newPushes takes push-to-deploy webhook deliveries: the rules decide,
// the builder builds the pushed commit.
func (a *App) newPushes() *builder.Pushes {
	return &builder.Pushes{Records: a.mg, Build: a.gitBuild(), Clock: a.cfg.Clock, Logger: a.log.With("component", "push")}
}

// gitBuild starts a git build of what a delivery names: the endpoint's
// repository at the pushed commit (on its branch), or at the tag.
func (a *App) gitBuild() builder.GitBuilder {
	return func(ctx context.Context, p mgmt.GitPush) (store.Build, error) {
		src := mgmt.GitSource{URL: p.Repository, ContextPath: p.Context, Commit: p.Commit, Branch: p.Branch, CredentialID: p.CredentialID, Ref: p.Branch}
		if p.Tag != "" {
			src.Ref = p.Tag
		}
		return a.builds.SubmitGit(ctx, p.EndpointID, mgmt.BuildInput{EndpointID: p.EndpointID, Dockerfile: p.Dockerfile, Git: &src})
	}
}

// dockerImages builds on the Docker daemon and pushes from it.
type dockerImages struct{ d *docker.Docker }

func (i dockerImages) ImageExists(ctx context.Context, ref string) (bool, error) {
	return i.d.ImageExists(ctx, ref)
}

func (i dockerImages) Build(ctx context.Context, contextTar io.Reader, s builder.Spec, line func(string)) error {
	return i.d.BuildImage(ctx, contextTar, docker.BuildSpec{Tag: s.Tag, Dockerfile: s.Dockerfile, Target: s.Target,
		BuildArgs: s.BuildArgs, Labels: s.Labels}, line)
}

func (i dockerImages) RemoveImage(ctx context.Context, ref string) (bool, error) {
	ok, err := i.d.ImageExists(ctx, ref)
	if err != nil || !ok {
		return false, err
	}
	return true, i.d.RemoveImage(ctx, ref)
}

func (i dockerImages) Push(ctx context.Context, local, remote string, login *builder.Login, line func(string)) (string, error) {
	var auth *runtime.RegistryAuth
	if login != nil {
		auth = &runtime.RegistryAuth{Username: login.Username, Password: login.Password}
	}
	return i.d.PushImage(ctx, local, remote, auth, line)
}

// buildkitImages builds on a BuildKit daemon straight into the registry.
type buildkitImages struct{ bk *buildkit.Client }

func bkLogin(l *builder.Login) *buildkit.Login {
	if l == nil {
		return nil
	}
	return &buildkit.Login{Username: l.Username, Password: l.Password}
}

func bkSpec(s builder.Spec) buildkit.Spec {
	return buildkit.Spec{Dockerfile: s.Dockerfile, Target: s.Target, BuildArgs: s.BuildArgs}
}

func (i buildkitImages) RegistryDigest(ctx context.Context, remote string, login *builder.Login) (string, error) {
	return buildkit.RegistryDigest(ctx, remote, bkLogin(login))
}

func (i buildkitImages) BuildPush(ctx context.Context, contextTar io.Reader, s builder.Spec, remote string, login *builder.Login, line func(string), pushing func()) (string, error) {
	return i.bk.BuildPush(ctx, contextTar, bkSpec(s), remote, bkLogin(login), line, pushing)
}

// buildkitLoad builds on a BuildKit daemon and loads the image into the
// Docker daemon workers run on; whether it is there already is the
// Docker daemon's answer, as for its own builds.
type buildkitLoad struct {
	bk *buildkit.Client
	d  *docker.Docker
}

func (i buildkitLoad) ImageExists(ctx context.Context, ref string) (bool, error) {
	return i.d.ImageExists(ctx, ref)
}

func (i buildkitLoad) Build(ctx context.Context, contextTar io.Reader, s builder.Spec, line func(string)) error {
	return i.bk.BuildLoad(ctx, contextTar, bkSpec(s), s.Tag, func(ctx context.Context, r io.Reader) error {
		return i.d.LoadImage(ctx, r, line)
	}, line)
}

func (i buildkitLoad) Push(ctx context.Context, local, remote string, login *builder.Login, line func(string)) (string, error) {
	return dockerImages{i.d}.Push(ctx, local, remote, login, line)
}

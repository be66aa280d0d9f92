// Package buildkit builds images on a BuildKit daemon (berth serve
// --buildkit-addr) through the github.com/moby/buildkit client: the
// dockerfile.v0 frontend reads the context tar Berth already made (sent
// through the session's upload, so it is never unpacked on Berth's side),
// and the image is either pushed by BuildKit itself to a registry (the
// image exporter, with the login handed over the session) or written as
// a docker archive for a Docker daemon to load.
package buildkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	cerrdefs "github.com/containerd/errdefs"
	clog "github.com/containerd/log"
	"github.com/distribution/reference"
	bk "github.com/moby/buildkit/client"
	"github.com/moby/buildkit/session"
	"github.com/moby/buildkit/session/auth"
	"github.com/moby/buildkit/session/upload/uploadprovider"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

// Client is a connection to one BuildKit daemon. Safe for concurrent use.
type Client struct {
	c    *bk.Client
	addr string
}

// Connect dials the daemon at addr (unix:///run/buildkit/buildkitd.sock,
// tcp://host:port) and asks it for its version, so a wrong address fails
// at start-up rather than at the first build.
func Connect(ctx context.Context, addr string) (*Client, error) {
	c, err := bk.New(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("buildkit at %s: %w", addr, err)
	}
	if _, err := c.Info(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("buildkit at %s: %w", addr, err)
	}
	return &Client{c: c, addr: addr}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

// Spec is one build's options.
type Spec struct {
	Dockerfile string // path inside the context
	Target     string
	BuildArgs  map[string]string
}

// Login is a registry's username and password.
type Login struct{ Username, Password string }

// BuildPush builds spec from contextTar and has BuildKit push the image
// as remote (HOST/NAME:TAG), with login for remote's host (nil:
// anonymous). It returns the digest the registry stored. pushing (may be
// nil) is called once, when BuildKit starts the upload. Cancelling ctx
// cancels the build in the daemon.
func (c *Client) BuildPush(ctx context.Context, contextTar io.Reader, spec Spec, remote string, login *Login, line func(string), pushing func()) (string, error) {
	named, err := reference.ParseNormalizedNamed(remote)
	if err != nil {
		return "", fmt.Errorf("push %q: %w", remote, err)
	}
	exp := bk.ExportEntry{Type: bk.ExporterImage, Attrs: map[string]string{"name": remote, "push": "true"}}
	var once sync.Once
	seen := func(l string) {
		if pushing != nil && strings.Contains(l, "pushing layers") {
			once.Do(pushing)
		}
		line(l)
	}
	res, err := c.solve(ctx, contextTar, spec, exp, &authServer{host: reference.Domain(named), login: login}, seen)
	if err != nil {
		return "", err
	}
	d := res.ExporterResponse["containerimage.digest"]
	if d == "" {
		return "", fmt.Errorf("push %s: BuildKit answered no digest", remote)
	}
	return d, nil
}

// BuildLoad builds spec from contextTar as tag and hands the image, a
// docker archive, to load (a Docker daemon's image load) as BuildKit
// writes it.
func (c *Client) BuildLoad(ctx context.Context, contextTar io.Reader, spec Spec, tag string, load func(context.Context, io.Reader) error, line func(string)) error {
	var (
		wg      sync.WaitGroup
		loadErr error
	)
	exp := bk.ExportEntry{Type: bk.ExporterDocker, Attrs: map[string]string{"name": tag}}
	exp.Output = func(map[string]string) (io.WriteCloser, error) {
		pr, pw := io.Pipe()
		wg.Add(1)
		go func() {
			defer wg.Done()
			loadErr = load(ctx, pr)
			// Unblock BuildKit's writes if the load stopped reading.
			pr.CloseWithError(errors.Join(loadErr, errors.New("the image load ended")))
		}()
		return pw, nil
	}
	_, err := c.solve(ctx, contextTar, spec, exp, nil, line)
	wg.Wait()
	if err != nil {
		return err
	}
	if loadErr != nil {
		return fmt.Errorf("load %s into the Docker daemon: %w", tag, loadErr)
	}
	return nil
}

// solve runs the dockerfile.v0 frontend on contextTar with one export,
// the progress turned into lines.
func (c *Client) solve(ctx context.Context, contextTar io.Reader, spec Spec, exp bk.ExportEntry, a *authServer, line func(string)) (*bk.SolveResponse, error) {
	up := uploadprovider.New()
	attrs := map[string]string{
		"context":  up.Add(io.NopCloser(contextTar)),
		"filename": spec.Dockerfile,
	}
	if spec.Target != "" {
		attrs["target"] = spec.Target
	}
	for k, v := range spec.BuildArgs {
		attrs["build-arg:"+k] = v
	}
	attachables := []session.Attachable{up}
	if a != nil {
		attachables = append(attachables, a)
	}
	ch := make(chan *bk.SolveStatus)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p := newPrinter(line)
		for st := range ch {
			p.status(st)
		}
		p.flush()
	}()
	res, err := c.c.Solve(ctx, nil, bk.SolveOpt{
		Frontend: "dockerfile.v0", FrontendAttrs: attrs, Exports: []bk.ExportEntry{exp}, Session: attachables,
	}, ch)
	<-done
	if err != nil {
		return nil, fmt.Errorf("buildkit: %w", err)
	}
	return res, nil
}

// authServer hands BuildKit the login for one registry host over the
// session; any other host is anonymous. GetTokenAuthority and FetchToken
// are left unimplemented, so the daemon fetches tokens itself with these
// credentials.
type authServer struct {
	auth.UnimplementedAuthServer
	host  string
	login *Login
}

func (a *authServer) Register(s *grpc.Server) { auth.RegisterAuthServer(s, a) }

func (a *authServer) Credentials(_ context.Context, req *auth.CredentialsRequest) (*auth.CredentialsResponse, error) {
	if a.login == nil || req.Host != a.host {
		return &auth.CredentialsResponse{}, nil
	}
	return &auth.CredentialsResponse{Username: a.login.Username, Secret: a.login.Password}, nil
}

// RegistryDigest is the digest remote (HOST/NAME:TAG) names in its
// registry, "" when the registry has no such tag. Loopback registries
// are spoken to over plain HTTP, as BuildKit does.
func RegistryDigest(ctx context.Context, remote string, login *Login) (string, error) {
	named, err := reference.ParseNormalizedNamed(remote)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", remote, err)
	}
	host := reference.Domain(named)
	creds := func(h string) (string, string, error) {
		if login == nil || h != host {
			return "", "", nil
		}
		return login.Username, login.Password, nil
	}
	r := docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(
		docker.WithPlainHTTP(docker.MatchLocalhost),
		docker.WithAuthorizer(docker.NewDockerAuthorizer(docker.WithAuthCreds(creds))),
	)})
	// containerd logs every 404 through logrus; a missing tag is an answer.
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	_, desc, err := r.Resolve(clog.WithLogger(ctx, logrus.NewEntry(quiet)), named.String())
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", remote, err)
	}
	return desc.Digest.String(), nil
}

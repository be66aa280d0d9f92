// Package docker is Berth's Docker runtime: images, containers, logs and
// events through the Docker Engine API (Docker), and the runtime.Backend
// that runs workers and pods as containers of one daemon (Backend). It
// knows nothing about endpoints or jobs; callers describe containers with
// labels and ContainerSpec, and the labels are the truth after a restart.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/versions"
)

// MinAPIVersion is the oldest Engine API Berth supports (Docker 20.10,
// Debian 12's docker.io). Newer features are used only when detected.
const MinAPIVersion = "1.41"

// pingTimeout bounds the start-up ping when the caller's context has no
// deadline, so Berth starts quickly without Docker.
const pingTimeout = 5 * time.Second

// Docker is a connection to one Docker daemon. It is safe for concurrent use.
type Docker struct {
	cli  *client.Client
	log  *slog.Logger
	info DaemonInfo

	// diskOpt remembers whether StorageOpt "size" works on this daemon
	// (diskUnknown until the first create that asks for it).
	diskOpt atomic.Int32

	// OnPull, when set before use, is told of every image pull: the
	// reference, how long it took and its error (nil: pulled). For
	// metrics; must not block.
	OnPull func(ref string, took time.Duration, err error)
}

// DaemonInfo is what Berth learned about the daemon at connect time.
type DaemonInfo struct {
	Host          string   // e.g. unix:///var/run/docker.sock
	APIVersion    string   // negotiated API version
	ServerVersion string   // engine version, "" if Info failed
	StorageDriver string   // e.g. overlay2, fuse-overlayfs
	Runtimes      []string // OCI runtimes, e.g. runc, nvidia
	// CDIEnabled is true when the daemon reports CDI spec dirs (API 1.45+,
	// Docker 26+ with CDI on). False also means "unknown" on older daemons.
	CDIEnabled  bool
	CDISpecDirs []string
}

// HasRuntime reports whether the daemon lists the named OCI runtime.
func (i DaemonInfo) HasRuntime(name string) bool { return slices.Contains(i.Runtimes, name) }

const (
	diskUnknown int32 = iota
	diskSupported
	diskUnsupported
)

// Connect connects to the daemon named by the environment (DOCKER_HOST
// etc.), negotiates the API version and pings it. It fails when no daemon
// answers; Berth can still run without Docker, so the caller decides.
func Connect(ctx context.Context, log *slog.Logger) (*Docker, error) {
	if log == nil {
		log = slog.Default()
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	d := &Docker{cli: cli, log: log}
	if err := d.connect(ctx); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return d, nil
}

func (d *Docker) connect(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pingTimeout)
		defer cancel()
	}
	host := d.cli.DaemonHost()
	if _, err := d.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("docker daemon not reachable at %s: %w", host, err)
	}
	v := d.cli.ClientVersion()
	if versions.LessThan(v, MinAPIVersion) {
		return fmt.Errorf("docker daemon at %s speaks API %s; Berth needs %s or newer", host, v, MinAPIVersion)
	}
	d.info = DaemonInfo{Host: host, APIVersion: v}

	// Info is best effort: it only refines optional features.
	res, err := d.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		d.log.Warn("docker info failed; optional features disabled", "err", err)
		return nil
	}
	in := res.Info
	d.info.ServerVersion = in.ServerVersion
	d.info.StorageDriver = in.Driver
	for name := range in.Runtimes {
		d.info.Runtimes = append(d.info.Runtimes, name)
	}
	slices.Sort(d.info.Runtimes)
	d.info.CDISpecDirs = in.CDISpecDirs
	d.info.CDIEnabled = len(in.CDISpecDirs) > 0
	d.log.Info("docker connected", "host", host, "api", v, "engine", in.ServerVersion,
		"storage", in.Driver, "cdi", d.info.CDIEnabled)
	return nil
}

// Close releases the client's connections.
func (d *Docker) Close() error { return d.cli.Close() }

// Ping checks that the daemon still answers.
func (d *Docker) Ping(ctx context.Context) error {
	if _, err := d.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("docker ping: %w", err)
	}
	return nil
}

// APIVersion is the negotiated Engine API version.
func (d *Docker) APIVersion() string { return d.info.APIVersion }

// Info returns what was learned about the daemon at connect time.
func (d *Docker) Info() DaemonInfo {
	in := d.info
	in.Runtimes = slices.Clone(in.Runtimes)
	in.CDISpecDirs = slices.Clone(in.CDISpecDirs)
	return in
}

// CDIEnabled reports whether the daemon advertises CDI (see DaemonInfo).
func (d *Docker) CDIEnabled() bool { return d.info.CDIEnabled }

// Client exposes the underlying Engine API client for rare needs not
// covered here (and for tests).
func (d *Docker) Client() *client.Client { return d.cli }

// IsNotFound reports whether err means the container or image does not exist.
func IsNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

// IsNoGPURuntime reports whether err is the daemon saying it cannot give a
// container the requested GPUs: no NVIDIA toolkit/runtime, or CDI devices
// it cannot resolve. The HTTP status differs across engine versions (500 on
// 20.10, 400 on 28), so the text is matched.
func IsNoGPURuntime(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{
		`could not select device driver`,
		`unknown runtime specified nvidia`,
		`unresolvable cdi devices`,
		`cdi device injection failed`,
		`nvidia-container-cli`,
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Pause freezes every process of a running container (cgroup freezer).
func (d *Docker) Pause(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("pause container %s: %w", shortID(id), err)
	}
	return nil
}

// Unpause resumes a paused container.
func (d *Docker) Unpause(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("unpause container %s: %w", shortID(id), err)
	}
	return nil
}

// BridgeGateway returns the gateway address of Docker's default bridge
// network (docker0, usually 172.17.0.1): where "host-gateway" points from a
// container, so a listener bound there is reachable from worker containers
// without exposing it on the LAN. Engine 20.10 lists no gateway for the
// default bridge; the bridge interface's address is used then (Berth runs
// on the daemon's host), else the subnet's first address.
func (d *Docker) BridgeGateway(ctx context.Context) (string, error) {
	res, err := d.cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspect the bridge network: %w", err)
	}
	var subnet netip.Prefix
	for _, c := range res.Network.IPAM.Config {
		if c.Gateway.IsValid() && c.Gateway.Is4() {
			return c.Gateway.String(), nil
		}
		if c.Subnet.IsValid() && c.Subnet.Addr().Is4() && !subnet.IsValid() {
			subnet = c.Subnet
		}
	}
	if !subnet.IsValid() {
		return "", errors.New("the bridge network has no IPv4 subnet")
	}
	name := res.Network.Options["com.docker.network.bridge.name"]
	if name == "" {
		name = "docker0"
	}
	if ifc, err := net.InterfaceByName(name); err == nil {
		if addrs, err := ifc.Addrs(); err == nil {
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && subnet.Contains(p.Addr()) {
					return p.Addr().String(), nil
				}
			}
		}
	}
	return subnet.Masked().Addr().Next().String(), nil
}

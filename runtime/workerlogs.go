package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// ErrUnknownWorker: no container of this instance belongs to the worker.
var ErrUnknownWorker = errors.New("no container for this worker")

// WorkerLogs returns a worker container's output (stdout and stderr merged
// by line). tail > 0 keeps the container's last tail lines; follow streams
// until the container stops or ctx ends. With jobID set only the worker's
// JSON log lines whose requestId is that job are returned (tail applies
// before that filter). The logs of the last failed container of an
// endpoint are kept until the next failure.
func (s *Supervisor) WorkerLogs(ctx context.Context, endpointID, workerID string, follow bool, tail int, jobID string) (io.ReadCloser, error) {
	s.mu.Lock()
	cid := ""
	if ws := s.workers[workerID]; ws != nil && ws.endpointID == endpointID {
		cid = ws.containerID
	}
	s.mu.Unlock()
	if cid == "" {
		// Not running: maybe a kept failed container.
		infos, err := s.d.List(ctx, s.cfg.Instance)
		if err != nil {
			return nil, err
		}
		for _, in := range infos {
			if in.Labels[LabelKind] == KindWorker && in.Labels[LabelWorker] == workerID && in.Labels[LabelEndpoint] == endpointID {
				cid = in.ID
			}
		}
	}
	if cid == "" {
		return nil, fmt.Errorf("worker %s of endpoint %s: %w", workerID, endpointID, ErrUnknownWorker)
	}
	rc, err := s.d.Logs(ctx, cid, follow, tail, time.Time{})
	if err != nil {
		return nil, err
	}
	if jobID == "" {
		return rc, nil
	}
	return FilterJobLogs(rc, jobID), nil
}

// FilterJobLogs passes on only the runpod JSON log lines of one job
// (requestId == jobID), each as its raw line. Closing the result closes rc.
func FilterJobLogs(rc io.ReadCloser, jobID string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		br := bufio.NewReaderSize(rc, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				if ll, ok := ParseLogLine(line); ok && ll.RequestID == jobID {
					if _, werr := io.WriteString(pw, ll.Raw+"\n"); werr != nil {
						_ = rc.Close()
						return
					}
				}
			}
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return &filterReader{PipeReader: pr, src: rc}
}

type filterReader struct {
	*io.PipeReader
	src io.Closer
}

func (f *filterReader) Close() error {
	_ = f.PipeReader.Close()
	return f.src.Close()
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

// DetectHostIP guesses the machine's LAN address (the source address of
// the default route), for pods' publicIp; "127.0.0.1" when there is none.
func DetectHostIP() string {
	// UDP "connect" sends nothing; it only picks the route's source.
	c, err := net.Dial("udp4", "192.0.2.1:9")
	if err == nil {
		defer c.Close()
		if a, ok := c.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsLoopback() && !a.IP.IsUnspecified() {
			return a.IP.String()
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 ||
			strings.HasPrefix(ifc.Name, "docker") || strings.HasPrefix(ifc.Name, "br-") || strings.HasPrefix(ifc.Name, "veth") {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				if ip := p.Addr(); ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
					return ip.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

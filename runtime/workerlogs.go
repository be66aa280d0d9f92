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
		cid = ws.instanceID
	}
	s.mu.Unlock()
	if cid == "" {
		// Not running: maybe a kept failed container.
		infos, err := s.b.List(ctx)
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
	rc, err := s.b.Logs(ctx, cid, follow, tail)
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

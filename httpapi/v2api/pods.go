package v2api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// Pod is v2's Pod.
type Pod struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	Status           string            `json:"status"`
	Actions          []string          `json:"actions"`
	Image            string            `json:"image"`
	Args             string            `json:"args"`
	Disk             int               `json:"disk"`
	Mounts           Mounts            `json:"mounts"`
	Ports            []string          `json:"ports"`
	Env              map[string]string `json:"env"`
	Registry         *string           `json:"registry"`
	GPU              *GPUConfig        `json:"gpu,omitempty"`
	CPU              *CPUConfig        `json:"cpu,omitempty"`
	Cloud            string            `json:"cloud"`
	DataCenterID     *string           `json:"dataCenterId"`
	CudaVersion      *string           `json:"cudaVersion"`
	SSH              PodSSH            `json:"ssh"`
	Template         *string           `json:"template"`
	Cost             float64           `json:"cost"`
	Locked           bool              `json:"locked"`
	GlobalNetworking GlobalNetworking  `json:"globalNetworking"`
	Runtime          *PodRuntime       `json:"runtime"`
	CreatedAt        time.Time         `json:"createdAt"`
	StartedAt        *time.Time        `json:"startedAt"`
	// Berth: why the last action did not take effect, and ids accepted
	// but unknown here.
	StatusMessage string   `json:"statusMessage,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
	// Berth: how the container last ended on its own (status EXITED).
	LastExit *store.PodExit `json:"lastExit,omitempty"`
}

// Mounts is v2's Mounts: the pod volume or one network volume.
type Mounts struct {
	Persistent *PersistentMount `json:"persistent,omitempty"`
	Network    []NetworkMount   `json:"network,omitempty"`
}

// NetworkMount is a network volume mounted at Path.
type NetworkMount struct {
	VolumeID string `json:"volumeId"`
	Path     string `json:"path"`
}

// GPUConfig is v2's GpuConfig.
type GPUConfig struct {
	ID    string `json:"id"`
	Count int    `json:"count"`
}

// PodSSH is v2's PodSsh: Berth has no SSH proxy; direct is the host's
// mapping of 22/tcp when the pod exposes it.
type PodSSH struct {
	Proxy  *SSHEndpoint `json:"proxy"`
	Direct *SSHEndpoint `json:"direct"`
}

type SSHEndpoint struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Username string `json:"username"`
	Command  string `json:"command"`
}

type GlobalNetworking struct {
	Enabled bool `json:"enabled"`
}

// PodRuntime is v2's PodRuntime (uptime and ports of a running pod).
type PodRuntime struct {
	Uptime int           `json:"uptime"`
	Ports  []RuntimePort `json:"ports"`
}

type RuntimePort struct {
	Private int     `json:"private"`
	Public  *int    `json:"public"`
	Type    string  `json:"type"`
	IP      *string `json:"ip"`
}

func (a *API) viewPod(p store.Pod, prices mgmt.Prices) Pod {
	v := Pod{
		ID: p.ID, Name: p.Name, Status: p.DesiredStatus, Image: p.ImageName, Args: joinArgs(p.DockerStartCmd),
		Disk: p.ContainerDiskInGb, Ports: nonNil(p.Ports), Env: p.Env, Cloud: p.CloudType, Locked: p.Locked,
		GlobalNetworking: GlobalNetworking{Enabled: p.GlobalNetworking}, CreatedAt: p.CreatedAt,
		StatusMessage: p.StatusMessage, Warnings: p.Warnings, DataCenterID: ptr(mgmt.PodDataCenter(p)), LastExit: p.LastExit,
	}
	if v.Env == nil {
		v.Env = map[string]string{}
	}
	if v.Cloud == "" {
		v.Cloud = "SECURE"
	}
	if p.ContainerRegistryAuthID != "" {
		v.Registry = ptr(p.ContainerRegistryAuthID)
	}
	if p.TemplateID != "" {
		v.Template = ptr(p.TemplateID)
	}
	switch p.DesiredStatus {
	case store.PodRunning:
		v.Actions = []string{"stop", "restart", "terminate"}
	case store.PodTerminated:
		v.Actions = []string{}
	default:
		v.Status, v.Actions = "EXITED", []string{"start", "terminate"}
	}
	switch {
	case p.NetworkVolumeID != "":
		v.Mounts.Network = []NetworkMount{{VolumeID: p.NetworkVolumeID, Path: p.VolumeMountPath}}
	case p.VolumeInGb > 0:
		v.Mounts.Persistent = &PersistentMount{Size: p.VolumeInGb, Path: p.VolumeMountPath}
	}
	gpuType, gpus := "", 0
	if p.ComputeType == "CPU" {
		id := "cpu3c"
		if len(p.CPUFlavorIDs) > 0 {
			id = p.CPUFlavorIDs[0]
		}
		v.CPU = &CPUConfig{ID: id, VCPUCount: p.VCPUCount, Memory: p.VCPUCount * gpu.CPUMemoryPerVCPU(id)}
	} else {
		gpus = p.GPUCount
		if p.GPU != nil {
			gpuType, gpus = p.GPU.ID, p.GPU.Count
		} else if len(p.GPUTypeIDs) > 0 {
			gpuType = p.GPUTypeIDs[0]
		}
		v.GPU = &GPUConfig{ID: gpuType, Count: gpus}
	}
	v.Cost = prices.Hourly(gpuType, gpus, p.VCPUCount)
	if !p.LastStartedAt.IsZero() {
		v.StartedAt = ptr(p.LastStartedAt.UTC())
	}
	if p.DesiredStatus == store.PodRunning {
		rt := &PodRuntime{Ports: []RuntimePort{}}
		if !p.LastStartedAt.IsZero() {
			rt.Uptime = max(0, int(a.cfg.Clock.Now().Sub(p.LastStartedAt).Seconds()))
		}
		for _, spec := range p.Ports {
			port, proto, _ := strings.Cut(spec, "/")
			n, err := strconv.Atoi(port)
			if err != nil {
				continue
			}
			rp := RuntimePort{Private: n, Type: proto}
			if hp, ok := p.PortMappings[port]; ok {
				rp.Public = ptr(hp)
				if p.PublicIP != "" {
					rp.IP = ptr(p.PublicIP)
				}
				if port == "22" && proto == "tcp" {
					host := p.PublicIP
					if host == "" {
						host = "127.0.0.1"
					}
					v.SSH.Direct = &SSHEndpoint{Host: host, Port: hp, Username: "root",
						Command: fmt.Sprintf("ssh root@%s -p %d", host, hp)}
				}
			}
			rt.Ports = append(rt.Ports, rp)
		}
		v.Runtime = rt
	}
	return v
}

// PodList is v2's ListPodsResponse.
type PodList struct {
	Pods []Pod `json:"pods"`
}

func (a *API) listPods(w http.ResponseWriter, r *http.Request) {
	if v := r.URL.Query().Get("includeClusterPods"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			a.fail(w, r, bad("includeClusterPods", "includeClusterPods must be true or false, got %q", v))
			return
		}
	}
	// Berth has no clusters, so includeClusterPods adds nothing.
	ps, err := a.cfg.Mgmt.ListPods(r.Context(), mgmt.PodFilter{})
	prices := a.cfg.Mgmt.PricesOrZero()
	out := PodList{Pods: []Pod{}}
	for _, p := range ps {
		out.Pods = append(out.Pods, a.viewPod(p, prices))
	}
	a.answer(w, r, http.StatusOK, out, err)
}

func (a *API) getPod(w http.ResponseWriter, r *http.Request) {
	p, err := a.cfg.Mgmt.GetPod(r.Context(), pathID(r))
	a.answer(w, r, http.StatusOK, a.viewPod(p, a.cfg.Mgmt.PricesOrZero()), err)
}

type gpuBody struct {
	ID                  string    `json:"id"`
	Count               *int      `json:"count"`
	AllowedCudaVersions *[]string `json:"allowedCudaVersions"`
	MinCudaVersion      *string   `json:"minCudaVersion"`
}

type mountsBody struct {
	Persistent *PersistentMount `json:"persistent"`
	Network    *[]NetworkMount  `json:"network"`
}

type podBody struct {
	ContainerConfig
	Name             *string     `json:"name"`
	Cloud            *string     `json:"cloud"`
	CPU              *cpuBody    `json:"cpu"`
	DataCenterIDs    *[]string   `json:"dataCenterIds"`
	GlobalNetworking *bool       `json:"globalNetworking"`
	GPU              *gpuBody    `json:"gpu"`
	Mounts           *mountsBody `json:"mounts"`
	StartJupyter     *bool       `json:"startJupyter"`
	StartSSH         *bool       `json:"startSsh"`
	TemplateID       *string     `json:"templateId"`
	Locked           *bool       `json:"locked"` // update only
}

// fields are the parts create and update share.
func (b podBody) fields() (mgmt.PodFields, error) {
	tin, err := b.templateInput()
	if err != nil {
		return mgmt.PodFields{}, err
	}
	f := mgmt.PodFields{Name: b.Name, ImageName: tin.ImageName, DockerStartCmd: tin.DockerStartCmd, Env: tin.Env,
		Ports: tin.Ports, ContainerDiskInGb: tin.ContainerDiskInGb, ContainerRegistryAuthID: tin.ContainerRegistryAuthID,
		GlobalNetworking: b.GlobalNetworking, Locked: b.Locked}
	if m := b.Mounts; m != nil {
		if m.Persistent != nil && m.Network != nil {
			return f, mgmt.InvalidInput("mounts", "mounts: give persistent or network, not both")
		}
		if p := m.Persistent; p != nil {
			f.VolumeInGb, f.VolumeMountPath = ptr(p.Size), ptr(p.Path)
		}
		if m.Network != nil && len(*m.Network) > 0 { // the schema allows at most one
			f.VolumeMountPath = ptr((*m.Network)[0].Path)
		}
	}
	return f, nil
}

func (a *API) createPod(w http.ResponseWriter, r *http.Request) {
	var b podBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	// v2.json: "supply exactly one of gpu or cpu", enforced here (400).
	switch {
	case b.GPU != nil && b.CPU != nil:
		a.fail(w, r, mgmt.InvalidInput("gpu", "give gpu or cpu, not both"))
		return
	case b.GPU == nil && b.CPU == nil:
		a.fail(w, r, mgmt.InvalidInput("gpu", "give gpu (a GPU type) or cpu (a CPU type): a pod runs on one of them"))
		return
	}
	f, err := b.fields()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	in := mgmt.PodInput{PodFields: f, TemplateID: b.TemplateID, CloudType: b.Cloud, StartSSH: b.StartSSH, StartJupyter: b.StartJupyter}
	if b.TemplateID == nil {
		// v2's defaults for a pod without a template: no pod volume, no
		// ports, no SSH or Jupyter.
		if in.VolumeInGb == nil {
			in.VolumeInGb = ptr(0)
		}
		if in.Ports == nil {
			in.Ports = []string{}
		}
		if in.StartSSH == nil {
			in.StartSSH = ptr(false)
		}
		if in.StartJupyter == nil {
			in.StartJupyter = ptr(false)
		}
	}
	if b.DataCenterIDs != nil {
		in.DataCenterIDs = nonNil(*b.DataCenterIDs)
	}
	if b.Mounts != nil && b.Mounts.Network != nil {
		if len(*b.Mounts.Network) == 0 {
			a.fail(w, r, mgmt.InvalidInput("mounts.network", "mounts.network: an empty list names no network volume; omit it for none"))
			return
		}
		in.NetworkVolumeID = ptr((*b.Mounts.Network)[0].VolumeID)
	}
	if c := b.CPU; c != nil {
		in.ComputeType, in.CPUFlavorIDs, in.VCPUCount = ptr("CPU"), []string{c.ID}, ptr(c.VCPUCount)
	}
	if g := b.GPU; g != nil {
		in.ComputeType, in.GPUTypeIDs, in.GPUCount = ptr("GPU"), []string{g.ID}, g.Count
		if g.AllowedCudaVersions != nil {
			in.AllowedCudaVersions = nonNil(*g.AllowedCudaVersions)
		}
	}
	p, err := a.cfg.Mgmt.CreatePod(r.Context(), in)
	var me *mgmt.Error
	if errors.As(err, &me) {
		// A pod names one GPU type (gpu.id) and a network mount.
		err = v2Names(me, map[string]string{"gpuTypeIds": "gpu.id", "networkVolumeId": "mounts.network.volumeId"})
	}
	a.answer(w, r, http.StatusCreated, a.viewPod(p, a.cfg.Mgmt.PricesOrZero()), err)
}

func (a *API) updatePod(w http.ResponseWriter, r *http.Request) {
	var b podBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	ctx := r.Context()
	cur, err := a.cfg.Mgmt.GetPod(ctx, pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	f, err := b.fields()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if m := b.Mounts; m != nil && m.Network != nil {
		f.NetworkVolume = ptr("") // [] asks to remove the mount: mgmt refuses it
		if len(*m.Network) > 0 {
			f.NetworkVolume = ptr((*m.Network)[0].VolumeID)
		}
	}
	f.TemplateID = b.TemplateID // its container settings, as if given here
	p, err := a.cfg.Mgmt.UpdatePod(ctx, cur.ID, f)
	a.answer(w, r, http.StatusOK, a.viewPod(p, a.cfg.Mgmt.PricesOrZero()), err)
}

func (a *API) deletePod(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeletePod(r.Context(), pathID(r)))
}

func (a *API) podAction(w http.ResponseWriter, r *http.Request) {
	var b actionBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	ctx := r.Context()
	id := pathID(r)
	cur, err := a.cfg.Mgmt.GetPod(ctx, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	allowed := a.viewPod(cur, mgmt.Prices{}).Actions // the schema has checked the action
	ok := false
	for _, x := range allowed {
		ok = ok || x == *b.Action
	}
	if !ok {
		problem(w, http.StatusConflict, fmt.Sprintf("cannot %s pod %s: it is %s (allowed: %s)", *b.Action, id, cur.DesiredStatus, strings.Join(allowed, ", ")))
		return
	}
	if *b.Action == "terminate" {
		a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeletePod(ctx, id))
		return
	}
	p, err := a.cfg.Mgmt.DoPodAction(ctx, id, *b.Action)
	a.answer(w, r, http.StatusOK, a.viewPod(p, a.cfg.Mgmt.PricesOrZero()), err)
}

// ---- logs (Server-Sent Events) ----

type logQuery struct {
	source string
	tail   int
	follow bool
}

func parseLogQuery(r *http.Request) (logQuery, error) {
	q := r.URL.Query()
	// v2.json: backfill tail lines, then stream live until the client
	// leaves; follow=false (Berth) ends after the backfill.
	lq := logQuery{source: q.Get("source"), tail: 100, follow: true}
	switch lq.source {
	case "", "container", "system":
	default:
		return lq, bad("source", "source must be container or system, got %q", lq.source)
	}
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 5000 {
			return lq, bad("tail", "tail must be an integer from 0 to 5000, got %q", v)
		}
		lq.tail = n
	}
	if v := q.Get("since"); v != "" {
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			return lq, bad("since", "since must be an RFC 3339 time, got %q", v)
		}
	}
	if v := q.Get("follow"); v != "" { // Berth: false ends after the backfill
		f, err := strconv.ParseBool(v)
		if err != nil {
			return lq, bad("follow", "follow must be true or false, got %q", v)
		}
		lq.follow = f
	}
	return lq, nil
}

func (a *API) podLogs(w http.ResponseWriter, r *http.Request) {
	lq, err := parseLogQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id := pathID(r)
	if _, err := a.cfg.Mgmt.GetPod(r.Context(), id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.sendLogs(w, r, lq, "pod "+id, a.cfg.PodLogs != nil, func(ctx context.Context) (io.ReadCloser, error) {
		return a.cfg.PodLogs(ctx, id, lq.follow, lq.tail)
	})
}

func (a *API) workerLogs(w http.ResponseWriter, r *http.Request) {
	lq, err := parseLogQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id, wid := pathID(r), mux.Vars(r)["workerId"]
	if _, _, err := a.endpoint(r, id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.sendLogs(w, r, lq, "worker "+wid+" of endpoint "+id, a.cfg.WorkerLogs != nil, func(ctx context.Context) (io.ReadCloser, error) {
		return a.cfg.WorkerLogs(ctx, id, wid, lq.follow, lq.tail, "")
	})
}

// sendLogs streams a container's log as v2's events: an id (the time and
// a sequence number) and data {ts, source, line}. The backfill (tail) is
// followed by the live log until the client leaves (v2.json: a stream;
// follow=false, Berth's, ends after the backfill). Docker gives Berth the
// lines without their times, so ts is when Berth read the line, and since
// and Last-Event-ID cannot select; source=system has no lines here (no
// host agent log): that stream stays open, empty.
func (a *API) sendLogs(w http.ResponseWriter, r *http.Request, lq logQuery, what string, have bool, open func(context.Context) (io.ReadCloser, error)) {
	if !have {
		problem(w, http.StatusServiceUnavailable, errNoLogs.Error())
		return
	}
	var rc io.ReadCloser
	if lq.source != "system" {
		var err error
		rc, err = open(r.Context())
		if err != nil {
			if a.cfg.IsNoContainer(err) {
				problem(w, http.StatusNotFound, what+" has no container")
				return
			}
			problem(w, http.StatusServiceUnavailable, "logs of "+what+": "+err.Error())
			return
		}
		// Closed when the client leaves, so a blocked read returns.
		var once sync.Once
		closeRC := func() { once.Do(func() { rc.Close() }) }
		defer closeRC()
		defer context.AfterFunc(r.Context(), closeRC)()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rcw := http.NewResponseController(w)
	_ = rcw.Flush() // the client sees the answer before the first line
	if rc == nil {
		if lq.follow {
			<-r.Context().Done()
		}
		return
	}
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seq := 0
	src := "container"
	if lq.source == "build" {
		src = "build"
	}
	for sc.Scan() {
		seq++
		ts := a.cfg.Clock.Now().UTC().Format(time.RFC3339)
		data, _ := json.Marshal(struct {
			TS     string `json:"ts"`
			Source string `json:"source"`
			Line   string `json:"line"`
		}{ts, src, sc.Text()})
		if _, err := fmt.Fprintf(w, "id: %s/%012d\ndata: %s\n\n", ts, seq, data); err != nil {
			return
		}
		if rcw.Flush() != nil {
			return
		}
	}
}

// actionBody is v2's PodActionRequest.
type actionBody struct {
	Action *string `json:"action"`
}

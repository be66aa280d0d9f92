package mgmt_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/mgmt"
	"berth/store"
)

func ptr[T any](v T) *T { return &v }

// newService opens a Service on a temporary bbolt file, checked for
// consistency after the test.
func newService(t *testing.T, mod ...func(*mgmt.Config)) (*mgmt.Service, *store.DB) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	cfg := mgmt.Config{Store: db, Clock: clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), DataDir: dir}
	for _, m := range mod {
		m(&cfg)
	}
	return mgmt.New(cfg), db
}

// wantErr checks err is a *mgmt.Error of kind naming field (when given)
// with words in its message.
func wantErr(t *testing.T, err error, kind mgmt.Kind, field string, words ...string) {
	t.Helper()
	var me *mgmt.Error
	if !errors.As(err, &me) {
		t.Fatalf("got %v (%T), want a *mgmt.Error of kind %v", err, err, kind)
	}
	if me.Kind != kind || (field != "" && me.Field != field) {
		t.Fatalf("got kind %v field %q (%s), want kind %v field %q", me.Kind, me.Field, me.Msg, kind, field)
	}
	for _, w := range words {
		if !strings.Contains(me.Msg, w) {
			t.Errorf("message %q lacks %q", me.Msg, w)
		}
	}
}

func TestTemplateRules(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		in    mgmt.TemplateInput
		field string
	}{
		{"no name", mgmt.TemplateInput{ImageName: ptr("a")}, "name"},
		{"no image", mgmt.TemplateInput{Name: ptr("n")}, "imageName"},
		{"blank image", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr(" ")}, "imageName"},
		{"category", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), Category: ptr("TPU")}, "category"},
		{"disk", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), VolumeInGb: ptr(-1)}, "volumeInGb"},
		{"mount", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), VolumeMountPath: ptr("ws")}, "volumeMountPath"},
		{"ports", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), Ports: mgmt.SplitPorts("8888/http,22/udp")}, "ports"},
		{"port range", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), Ports: []string{"70000/tcp"}}, "ports"},
		{"env", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), Env: map[string]string{"A=B": "x"}}, "env"},
		{"registry", mgmt.TemplateInput{Name: ptr("n"), ImageName: ptr("a"), ContainerRegistryAuthID: ptr("nope")}, "containerRegistryAuthId"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.CreateTemplate(ctx, c.in)
			wantErr(t, err, mgmt.Invalid, c.field, c.field)
		})
	}
	if ts, _ := s.ListTemplates(ctx, mgmt.TemplateFilter{IncludeEndpointBound: true}); len(ts) != 0 {
		t.Fatalf("%d templates stored after refused creates", len(ts))
	}

	tpl, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("alpine:3")})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.ContainerDiskInGb != 50 || tpl.VolumeMountPath != "/workspace" || !slices.Equal(tpl.Ports, []string{"8888/http", "22/tcp"}) {
		t.Errorf("defaults not applied: %+v", tpl)
	}
	_, err = s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("b")})
	wantErr(t, err, mgmt.Conflict, "", "already exists")
	// category and isServerless may change (v2.json: mutable fields).
	if got, err := s.UpdateTemplate(ctx, tpl.ID, mgmt.TemplateInput{Category: ptr("CPU"), IsServerless: ptr(true)}); err != nil || got.Category != "CPU" || !got.IsServerless {
		t.Errorf("changing category and isServerless: %+v, %v", got, err)
	}
	_, err = s.UpdateTemplate(ctx, tpl.ID, mgmt.TemplateInput{Category: ptr("GPU")})
	wantErr(t, err, mgmt.Invalid, "category", "must be one of")
	_, err = s.GetTemplate(ctx, "BAD")
	wantErr(t, err, mgmt.Invalid, "templateId")
	_, err = s.GetTemplate(ctx, "zzzzzzzzzz")
	wantErr(t, err, mgmt.NotFound, "", "not found")

	// A change to what runs rolls the endpoints using it.
	var changed []string
	s2, _ := newService(t, func(c *mgmt.Config) { c.EndpointChanged = func(id string) { changed = append(changed, id) } })
	tpl2, _ := s2.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("alpine:3")})
	ep, err := s2.CreateEndpoint(ctx, mgmt.EndpointInput{TemplateID: &tpl2.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.UpdateTemplate(ctx, tpl2.ID, mgmt.TemplateInput{Readme: ptr("hi")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.UpdateTemplate(ctx, tpl2.ID, mgmt.TemplateInput{ImageName: ptr("alpine:4")}); err != nil {
		t.Fatal(err)
	}
	eps, _, _ := s2.Endpoints(ctx, ep.ID, false)
	if eps[0].Version != 2 || !slices.Equal(changed, []string{ep.ID, ep.ID}) {
		t.Errorf("after an image change: version %d, changed %q; want 2 and [create, roll]", eps[0].Version, changed)
	}
	wantErr(t, s2.DeleteTemplate(ctx, tpl2.ID), mgmt.Conflict, "", "endpoint "+ep.ID)
}

func TestEndpointRules(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	tpl, _ := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("a")})
	with := func(f func(*mgmt.EndpointInput)) mgmt.EndpointInput {
		in := mgmt.EndpointInput{TemplateID: &tpl.ID}
		f(&in)
		return in
	}
	for _, c := range []struct {
		name  string
		in    mgmt.EndpointInput
		field string
	}{
		{"no template", mgmt.EndpointInput{}, "templateId"},
		{"missing template", mgmt.EndpointInput{TemplateID: ptr("zzzzzzzzzz")}, "templateId"},
		{"computeType", with(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("TPU") }), "computeType"},
		{"type", with(func(i *mgmt.EndpointInput) { i.Type = ptr("SERVERLESS") }), "type"},
		{"lb scaler", with(func(i *mgmt.EndpointInput) { i.Type, i.ScalerType = ptr("LOAD_BALANCER"), ptr("QUEUE_DELAY") }), "scalerType"},
		{"idleTimeout", with(func(i *mgmt.EndpointInput) { i.IdleTimeout = ptr(0) }), "idleTimeout"},
		{"workers", with(func(i *mgmt.EndpointInput) { i.WorkersMin, i.WorkersMax = ptr(4), ptr(2) }), "workersMin"},
		{"gpuCount", with(func(i *mgmt.EndpointInput) { i.GPUCount = ptr(0) }), "gpuCount"},
		{"executionTimeoutMs", with(func(i *mgmt.EndpointInput) { i.ExecutionTimeoutMs = ptr(int64(1)) }), "executionTimeoutMs"},
		{"gpu id", with(func(i *mgmt.EndpointInput) { i.GPUTypeIDs = []string{"A,B"} }), "gpuTypeIds"},
		{"data centre", with(func(i *mgmt.EndpointInput) { i.DataCenterIDs = []string{"eu-ro-1"} }), "dataCenterIds"},
		{"volume", with(func(i *mgmt.EndpointInput) { i.NetworkVolumeID = ptr("nope") }), "networkVolumeId"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.CreateEndpoint(ctx, c.in)
			wantErr(t, err, mgmt.Invalid, c.field, c.field)
		})
	}
	// GraphQL's gpuIds, translated by its adapter, and unknown ids.
	ep, err := s.CreateEndpoint(ctx, with(func(i *mgmt.EndpointInput) {
		i.GPUTypeIDs = []string{"AMPERE_16", "-NVIDIA RTX A4000", "FUTURE_999"}
		i.DataCenterIDs = []string{"EU-RO-1", "XX-NEW-9"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if ep.Version != 1 || ep.Name != ep.ID || ep.WorkersMax != 3 || len(ep.Warnings) != 2 {
		t.Errorf("created %+v; want version 1, name = id, workersMax 3, 2 warnings", ep)
	}
	_, err = s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{ComputeType: ptr("CPU")})
	wantErr(t, err, mgmt.Invalid, "computeType", "is fixed")
	if _, err := s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{ComputeType: ptr("GPU")}); err != nil {
		t.Errorf("repeating the compute type: %v", err)
	}
	if ep.Type != "QUEUE" || ep.ScalerType != "QUEUE_DELAY" {
		t.Errorf("default type %q scaler %q; want QUEUE, QUEUE_DELAY", ep.Type, ep.ScalerType)
	}
	_, err = s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{Type: ptr("LOAD_BALANCER")})
	wantErr(t, err, mgmt.Invalid, "type", "is fixed")
	if _, err := s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{Type: ptr("QUEUE")}); err != nil {
		t.Errorf("repeating the type: %v", err)
	}
	lb, err := s.CreateEndpoint(ctx, with(func(i *mgmt.EndpointInput) { i.Type = ptr("LOAD_BALANCER") }))
	if err != nil || lb.Type != "LOAD_BALANCER" || lb.ScalerType != "REQUEST_COUNT" || !lb.LoadBalancer() {
		t.Errorf("load-balancing endpoint %+v, %v; want type LOAD_BALANCER, scaler REQUEST_COUNT", lb, err)
	}
	_, err = s.UpdateEndpoint(ctx, lb.ID, mgmt.EndpointInput{ScalerType: ptr("QUEUE_DELAY")})
	wantErr(t, err, mgmt.Invalid, "scalerType", "REQUEST_COUNT")
	up, err := s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{WorkersMax: ptr(5)})
	if err != nil || up.Version != 1 || len(up.Warnings) != 2 {
		t.Errorf("scaling change: %+v, %v; want version 1, warnings kept", up, err)
	}
	up, err = s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{GPUTypeIDs: []string{"ADA_24"}})
	if err != nil || up.Version != 2 || len(up.Warnings) != 1 {
		t.Errorf("GPU change: %+v, %v; want version 2, the data-centre warning only", up, err)
	}
	wantErr(t, s.DeleteEndpoint(ctx, "nope"), mgmt.NotFound, "")
}

func TestVolumesAndRegistry(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	for _, c := range []struct {
		in    mgmt.VolumeInput
		field string
	}{
		{mgmt.VolumeInput{Size: ptr(1), DataCenterID: ptr("EU-RO-1")}, "name"},
		{mgmt.VolumeInput{Name: ptr("v"), DataCenterID: ptr("EU-RO-1")}, "size"},
		{mgmt.VolumeInput{Name: ptr("v"), Size: ptr(int(mgmt.LimitVolumeSize.Max) + 1), DataCenterID: ptr("EU-RO-1")}, "size"},
		{mgmt.VolumeInput{Name: ptr("v"), Size: ptr(1)}, "dataCenterId"},
		{mgmt.VolumeInput{Name: ptr("v"), Size: ptr(1), DataCenterID: ptr("the moon")}, "dataCenterId"},
	} {
		_, err := s.CreateVolume(ctx, c.in)
		wantErr(t, err, mgmt.Invalid, c.field, c.field)
	}
	v, err := s.CreateVolume(ctx, mgmt.VolumeInput{Name: ptr("v"), Size: ptr(20), DataCenterID: ptr("US-TX-3")})
	if err != nil || v.DataCenterID != "US-TX-3" {
		t.Fatalf("create: %+v, %v", v, err)
	}
	_, err = s.UpdateVolume(ctx, v.ID, mgmt.VolumeInput{Size: ptr(15)})
	wantErr(t, err, mgmt.Invalid, "size", "only grow")
	if err := s.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}

	_, err = s.CreateRegistryAuth(ctx, mgmt.RegistryAuthInput{Name: ptr("r"), Username: ptr("u")})
	wantErr(t, err, mgmt.Invalid, "password")
	a, err := s.CreateRegistryAuth(ctx, mgmt.RegistryAuthInput{Name: ptr("r"), Username: ptr("u"), Password: ptr("p")})
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("a"), ContainerRegistryAuthID: &a.ID})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, mgmt.EndpointInput{TemplateID: &tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	// A pod pulling with it blocks the delete (v2.json); a template does
	// not: it loses the reference, and its endpoint rolls.
	if err := s.DeleteRegistryAuth(ctx, a.ID); err != nil {
		t.Fatalf("delete a credential only a template uses: %v", err)
	}
	if got, _ := s.GetTemplate(ctx, tpl.ID); got.ContainerRegistryAuthID != "" {
		t.Errorf("the template still names the deleted credential: %+v", got)
	}
	if eps, _, _ := s.Endpoints(ctx, ep.ID, false); len(eps) != 1 || eps[0].Version != 2 {
		t.Errorf("the template's endpoint did not roll: %+v", eps)
	}
	wantErr(t, s.DeleteRegistryAuth(ctx, "cnosuchauth"), mgmt.NotFound, "")
}

// fakeRuntime fails every start with err.
type fakeRuntime struct{ err error }

func (f fakeRuntime) StartPod(context.Context, store.Pod) (mgmt.PodState, error) {
	return mgmt.PodState{}, f.err
}
func (f fakeRuntime) StopPod(context.Context, string) error { return f.err }
func (f fakeRuntime) ResetPod(context.Context, store.Pod) (mgmt.PodState, error) {
	return mgmt.PodState{}, f.err
}
func (f fakeRuntime) RemovePod(context.Context, string) error { return nil }

func TestPodRuntimeErrorKinds(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		rt   mgmt.PodRuntime
		kind mgmt.Kind
	}{
		{nil, mgmt.Unavailable},
		{fakeRuntime{errors.Join(mgmt.ErrPodCapacity, errors.New("2 of 2 held"))}, mgmt.Conflict},
		{fakeRuntime{errors.Join(mgmt.ErrPodInvalid, errors.New("no such image"))}, mgmt.Invalid},
		{fakeRuntime{errors.New("docker said no")}, mgmt.Unavailable},
		{fakeRuntime{nil}, 0},
	} {
		s, _ := newService(t, func(cfg *mgmt.Config) { cfg.Pods = c.rt })
		p, err := s.CreatePod(ctx, mgmt.PodInput{PodFields: mgmt.PodFields{ImageName: ptr("alpine:3")}})
		if got := mgmt.KindOf(err); got != c.kind {
			t.Errorf("runtime %v: kind %v (%v), want %v", c.rt, got, err, c.kind)
		}
		if c.kind == 0 {
			if p.DesiredStatus != store.PodRunning {
				t.Errorf("started pod: %+v", p)
			}
			continue
		}
		if _, err := s.GetPod(ctx, p.ID); mgmt.KindOf(err) != mgmt.NotFound {
			t.Errorf("a pod that failed to start was kept: %v", err)
		}
	}
	s, _ := newService(t, func(cfg *mgmt.Config) { cfg.Pods = fakeRuntime{} })
	_, err := s.CreatePod(ctx, mgmt.PodInput{PodFields: mgmt.PodFields{ImageName: ptr("a")}, VolumeEncrypted: ptr(true)})
	wantErr(t, err, mgmt.Unsupported, "volumeEncrypted")
	p, _ := s.CreatePod(ctx, mgmt.PodInput{PodFields: mgmt.PodFields{ImageName: ptr("a"), Locked: ptr(true)}})
	_, err = s.DoPodAction(ctx, p.ID, "stop")
	wantErr(t, err, mgmt.Conflict, "", "locked")
	_, err = s.DoPodAction(ctx, p.ID, "explode")
	wantErr(t, err, mgmt.Invalid, "action")
}

func TestBillingQuery(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	for _, c := range []struct {
		q     mgmt.BillingQuery
		field string
	}{
		{mgmt.BillingQuery{Bucket: "minute"}, "bucketSize"},
		{mgmt.BillingQuery{Kind: mgmt.BillPods, Grouping: "endpointId"}, "grouping"},
		{mgmt.BillingQuery{Start: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, "startTime"},
	} {
		_, err := s.Billing(ctx, c.q)
		wantErr(t, err, mgmt.Invalid, c.field)
	}
	b, err := s.Billing(ctx, mgmt.BillingQuery{Kind: mgmt.BillVolumes})
	if err != nil || b.Volumes == nil || len(b.Volumes) != 0 {
		t.Errorf("empty volume billing: %+v, %v; want an empty, non-nil list", b, err)
	}
}

func TestSplitHelpers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{`python handler.py --port 8000`, []string{"python", "handler.py", "--port", "8000"}, true},
		{`bash -c "echo hi; sleep 1"`, []string{"bash", "-c", "echo hi; sleep 1"}, true},
		{`''`, []string{""}, true},
		{``, []string{}, true},
		{`bash -c "unclosed`, nil, false},
	} {
		got, err := mgmt.SplitArgs(c.in)
		if (err == nil) != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("SplitArgs(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if got := mgmt.SplitPorts(" 8888/http, ,22/tcp"); !slices.Equal(got, []string{"8888/http", "22/tcp"}) {
		t.Errorf("SplitPorts = %q", got)
	}
}

func TestPodFilter(t *testing.T) {
	p := store.Pod{ID: "p1", ComputeType: "GPU", DesiredStatus: store.PodRunning, DataCenterIDs: []string{"EU-RO-1"},
		GPUTypeIDs: []string{"ADA_24"}, GPU: &store.PodGPU{ID: "NVIDIA GeForce RTX 4090"}}
	for _, c := range []struct {
		f    mgmt.PodFilter
		want bool
	}{
		{mgmt.PodFilter{}, true},
		{mgmt.PodFilter{DataCenterIDs: []string{"EU-RO-1"}}, true},
		{mgmt.PodFilter{DataCenterIDs: []string{mgmt.DataCenterID}}, true},
		{mgmt.PodFilter{DataCenterIDs: []string{"US-TX-3"}}, false},
		{mgmt.PodFilter{GPUTypeIDs: []string{"NVIDIA GeForce RTX 4090"}}, true},
		{mgmt.PodFilter{ComputeType: "CPU"}, false},
		{mgmt.PodFilter{DesiredStatus: store.PodRunning, ID: "p1"}, true},
	} {
		if got := c.f.Matches(mgmt.FactsOf(p)); got != c.want {
			t.Errorf("%+v: got %v, want %v", c.f, got, c.want)
		}
	}
	wantErr(t, mgmt.PodFilter{ComputeType: "TPU"}.Check(), mgmt.Invalid, "computeType")
}

// pullingRuntime holds StartPod until release is closed, reporting pull
// progress for the pod meanwhile (as the runtime does during a create).
type pullingRuntime struct {
	fakeRuntime
	started chan string
	release chan struct{}
	mu      sync.Mutex
	pulling map[string]string
}

func (f *pullingRuntime) StartPod(_ context.Context, p store.Pod) (mgmt.PodState, error) {
	f.mu.Lock()
	f.pulling[p.ID] = "pulling a:1: Downloading"
	f.mu.Unlock()
	f.started <- p.ID
	<-f.release
	f.mu.Lock()
	delete(f.pulling, p.ID)
	f.mu.Unlock()
	return mgmt.PodState{}, nil
}

func (f *pullingRuntime) PodProgress(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pulling[id]
}

// TestPodPullProgress: while a create pulls, the pod's views show the
// runtime's progress as statusMessage; afterwards nothing of it remains.
func TestPodPullProgress(t *testing.T) {
	ctx := context.Background()
	rt := &pullingRuntime{started: make(chan string, 1), release: make(chan struct{}), pulling: map[string]string{}}
	s, _ := newService(t, func(cfg *mgmt.Config) { cfg.Pods = rt })
	done := make(chan error, 1)
	go func() {
		_, err := s.CreatePod(ctx, mgmt.PodInput{PodFields: mgmt.PodFields{ImageName: ptr("a:1")}})
		done <- err
	}()
	id := <-rt.started
	if p, err := s.GetPod(ctx, id); err != nil || p.StatusMessage != "pulling a:1: Downloading" {
		t.Fatalf("GetPod during the pull: %+v, %v", p, err)
	}
	if l, err := s.ListPods(ctx, mgmt.PodFilter{}); err != nil || len(l) != 1 || l[0].StatusMessage != "pulling a:1: Downloading" {
		t.Fatalf("ListPods during the pull: %+v, %v", l, err)
	}
	close(rt.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p, err := s.GetPod(ctx, id); err != nil || p.StatusMessage != "" || p.DesiredStatus != store.PodRunning {
		t.Fatalf("GetPod after the pull: %+v, %v", p, err)
	}
}

// TestEndpointComputeRules: what a GPU or CPU endpoint may carry, decided
// once here for every surface.
func TestEndpointComputeRules(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	tpl, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("alpine:3")})
	if err != nil {
		t.Fatal(err)
	}
	in := func(f func(*mgmt.EndpointInput)) mgmt.EndpointInput {
		i := mgmt.EndpointInput{TemplateID: &tpl.ID}
		f(&i)
		return i
	}
	for _, c := range []struct {
		name  string
		in    mgmt.EndpointInput
		opt   mgmt.EndpointOptions
		field string // "" = accepted
		words []string
	}{
		{"unknown CPU flavour", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.CPUFlavorIDs = []string{"bogus"} }), mgmt.EndpointOptions{}, "cpuFlavorIds", []string{"bogus"}},
		{"a flavour twice", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.CPUFlavorIDs = []string{"cpu3c", "cpu3c"} }), mgmt.EndpointOptions{}, "cpuFlavorIds", []string{"twice"}},
		{"CPU flavours on a GPU endpoint", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("GPU"); i.CPUFlavorIDs = []string{"cpu3c"} }), mgmt.EndpointOptions{}, "cpuFlavorIds", []string{"GPU endpoint"}},
		{"flavours alone make a CPU endpoint", in(func(i *mgmt.EndpointInput) { i.CPUFlavorIDs = []string{"cpu5g"}; i.VCPUCount = ptr(4) }), mgmt.EndpointOptions{}, "", nil},
		{"1 vCPU on a CPU endpoint", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.VCPUCount = ptr(1) }), mgmt.EndpointOptions{}, "vcpuCount", []string{"2-256"}},
		{"6 vCPUs on a CPU endpoint", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.VCPUCount = ptr(6) }), mgmt.EndpointOptions{}, "vcpuCount", []string{"power of two"}},
		{"GPUs on a CPU endpoint", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.GPUTypeIDs = []string{"ADA_24"} }), mgmt.EndpointOptions{}, "gpuTypeIds", []string{"CPU endpoint"}},
		{"CUDA on a CPU endpoint", in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.MinCudaVersion = ptr("12.4") }), mgmt.EndpointOptions{}, "minCudaVersion", []string{"no CUDA"}},
		{"not a CUDA version", in(func(i *mgmt.EndpointInput) { i.AllowedCudaVersions = []string{"not-a-version"} }), mgmt.EndpointOptions{}, "allowedCudaVersions", []string{"not-a-version"}},
		{"a set and a floor", in(func(i *mgmt.EndpointInput) { i.AllowedCudaVersions = []string{"12.4"}; i.MinCudaVersion = ptr("12.1") }), mgmt.EndpointOptions{}, "allowedCudaVersions", []string{"mutually exclusive"}},
		{"an empty set and a floor", in(func(i *mgmt.EndpointInput) { i.AllowedCudaVersions = []string{}; i.MinCudaVersion = ptr("12.11") }), mgmt.EndpointOptions{}, "", nil},
		{"bad instance id", in(func(i *mgmt.EndpointInput) { i.InstanceIDs = []string{"cpu9z-2-4"} }), mgmt.EndpointOptions{}, "instanceIds", []string{"cpu9z-2-4"}},
		{"an exclusion outside the pools (GraphQL: recorded)", in(func(i *mgmt.EndpointInput) { i.GPUTypeIDs = []string{"ADA_24", "-NVIDIA L4"} }), mgmt.EndpointOptions{}, "", nil},
		{"an exclusion outside the pools (v2: refused)", in(func(i *mgmt.EndpointInput) { i.GPUTypeIDs = []string{"ADA_24", "-NVIDIA L4"} }), mgmt.EndpointOptions{V2Rules: true}, "gpuTypeIds", []string{"NVIDIA L4", "ADA_24"}},
		{"exclusions leaving nothing (v2)", in(func(i *mgmt.EndpointInput) { i.GPUTypeIDs = []string{"ADA_24", "-NVIDIA GeForce RTX 4090"} }), mgmt.EndpointOptions{V2Rules: true}, "gpuTypeIds", []string{"leave no GPU type"}},
		{"idleTimeout with REQUEST_COUNT (v2)", in(func(i *mgmt.EndpointInput) {
			i.ScalerType = ptr("REQUEST_COUNT")
			i.ScalerValue = ptr(2)
			i.IdleTimeout = ptr(30)
		}), mgmt.EndpointOptions{V2Rules: true}, "idleTimeout", []string{"REQUEST_COUNT"}},
		{"idleTimeout with REQUEST_COUNT (GraphQL)", in(func(i *mgmt.EndpointInput) {
			i.ScalerType = ptr("REQUEST_COUNT")
			i.ScalerValue = ptr(2)
			i.IdleTimeout = ptr(30)
		}), mgmt.EndpointOptions{}, "", nil},
		{"scalerValue past REQUEST_COUNT's range", in(func(i *mgmt.EndpointInput) { i.ScalerType = ptr("REQUEST_COUNT"); i.ScalerValue = ptr(3000) }), mgmt.EndpointOptions{}, "scalerValue", []string{"1-1000 requests"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := s.CreateEndpointWith(ctx, c.in, c.opt)
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantErr(t, err, mgmt.Invalid, c.field, c.words...)
			if e.ID != "" {
				t.Errorf("refused but returned %+v", e)
			}
		})
	}
	// An update: the compute family is fixed, repeating it is no change.
	cpu, err := s.CreateEndpoint(ctx, in(func(i *mgmt.EndpointInput) { i.ComputeType = ptr("CPU"); i.CPUFlavorIDs = []string{"cpu3c"} }))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateEndpoint(ctx, cpu.ID, mgmt.EndpointInput{ComputeType: ptr("GPU")})
	wantErr(t, err, mgmt.Invalid, "computeType", "is fixed", "CPU endpoint")
	if _, err := s.UpdateEndpoint(ctx, cpu.ID, mgmt.EndpointInput{ComputeType: ptr("CPU"), VCPUCount: ptr(8)}); err != nil {
		t.Errorf("repeating CPU with 8 vCPUs: %v", err)
	}
}

// TestEndpointWithItsOwnTemplate: an endpoint and the template made for it
// are one operation: stored together or not at all, the template deleted
// with the endpoint, replaced when the endpoint is given another, changed
// in place (a release) when it is the endpoint's own.
func TestEndpointWithItsOwnTemplate(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	count := func() (eps, tpls int) {
		es, _, _ := s.Endpoints(ctx, "", false)
		ts, _ := s.ListTemplates(ctx, mgmt.TemplateFilter{IncludeEndpointBound: true})
		return len(es), len(ts)
	}
	// Refused endpoint: no template either; refused template: no endpoint.
	_, err := s.CreateEndpointWith(ctx, mgmt.EndpointInput{WorkersMin: ptr(3), WorkersMax: ptr(1)}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: ptr("alpine:3")}})
	wantErr(t, err, mgmt.Invalid, "workersMin")
	_, err = s.CreateEndpointWith(ctx, mgmt.EndpointInput{}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: ptr("alpine:3"), ContainerRegistryAuthID: ptr("cnosuchauth")}})
	wantErr(t, err, mgmt.Invalid, "containerRegistryAuthId")
	_, err = s.CreateEndpointWith(ctx, mgmt.EndpointInput{}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{}})
	wantErr(t, err, mgmt.Invalid, "imageName", "required")
	if e, tp := count(); e != 0 || tp != 0 {
		t.Fatalf("after refusals: %d endpoints, %d templates", e, tp)
	}

	// From a user's template: a copy of it, bound, with the CUDA set.
	user, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("user"), ImageName: ptr("alpine:3"), Env: map[string]string{"A": "1"}, AllowedCudaVersions: []string{"12.4"}})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpointWith(ctx, mgmt.EndpointInput{Name: ptr("ep"), TemplateID: &user.ID}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: ptr("alpine:4")}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := s.GetTemplate(ctx, ep.TemplateID)
	if err != nil || own.ID == user.ID || own.EndpointID != ep.ID || own.ImageName != "alpine:4" || own.Env["A"] != "1" || !own.IsServerless ||
		!strings.HasPrefix(own.Name, "ep__") || !slices.Equal(ep.AllowedCudaVersions, []string{"12.4"}) {
		t.Fatalf("own template %+v (%v), endpoint %+v", own, err, ep)
	}
	// Changed in place: a release; the user's template is untouched.
	up, err := s.UpdateEndpointWith(ctx, ep.ID, mgmt.EndpointInput{}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: ptr("alpine:5")}})
	if err != nil || up.TemplateID != own.ID || up.Version != 2 {
		t.Fatalf("in-place change: %+v %v", up, err)
	}
	if u, _ := s.GetTemplate(ctx, user.ID); u.ImageName != "alpine:3" {
		t.Errorf("the user's template changed: %+v", u)
	}
	// A refused update changes neither record.
	_, err = s.UpdateEndpointWith(ctx, ep.ID, mgmt.EndpointInput{WorkersMax: ptr(-1)}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: ptr("alpine:6")}})
	wantErr(t, err, mgmt.Invalid, "workersMax")
	if o, _ := s.GetTemplate(ctx, own.ID); o.ImageName != "alpine:5" {
		t.Errorf("a refused update changed the template: %+v", o)
	}
	// Pointed at the user's template: its own template goes.
	if _, err := s.UpdateEndpoint(ctx, ep.ID, mgmt.EndpointInput{TemplateID: &user.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTemplate(ctx, own.ID); mgmt.KindOf(err) != mgmt.NotFound {
		t.Errorf("the replaced own template: %v", err)
	}
	// Deleting an endpoint deletes its own template, not a shared one.
	ep2, err := s.CreateEndpointWith(ctx, mgmt.EndpointInput{}, mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: ptr("busybox:1")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ep.ID, ep2.ID} {
		if err := s.DeleteEndpoint(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GetTemplate(ctx, ep2.TemplateID); mgmt.KindOf(err) != mgmt.NotFound {
		t.Errorf("the deleted endpoint's own template: %v", err)
	}
	if _, err := s.GetTemplate(ctx, user.ID); err != nil {
		t.Errorf("the user's template went with an endpoint: %v", err)
	}
}

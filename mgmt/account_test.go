package mgmt_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

func TestUpdateRegistryAuth(t *testing.T) {
	s, db := newService(t)
	ctx := context.Background()
	a, err := s.CreateRegistryAuth(ctx, mgmt.RegistryAuthInput{Name: ptr("hub"), Username: ptr("u"), Password: ptr("p")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.UpdateRegistryAuth(ctx, a.ID, mgmt.RegistryAuthInput{Username: ptr("u2"), Password: ptr("p2")})
	if err != nil || got.ID != a.ID || got.Name != "hub" || got.Username != "u2" {
		t.Fatalf("update: %+v %v", got, err)
	}
	if user, pass, _ := store.RegistryCredentials(db, a.ID); user != "u2" || pass != "p2" {
		t.Errorf("stored %q %q", user, pass)
	}
	cases := []struct {
		id    string
		in    mgmt.RegistryAuthInput
		kind  mgmt.Kind
		field string
	}{
		{a.ID, mgmt.RegistryAuthInput{Username: ptr("x")}, mgmt.Invalid, "password"},
		{a.ID, mgmt.RegistryAuthInput{Username: ptr(" "), Password: ptr("x")}, mgmt.Invalid, "username"},
		{a.ID, mgmt.RegistryAuthInput{Name: ptr("other"), Username: ptr("x"), Password: ptr("y")}, mgmt.Invalid, "name"},
		{"cnosuch", mgmt.RegistryAuthInput{Username: ptr("x"), Password: ptr("y")}, mgmt.NotFound, ""},
	}
	for _, c := range cases {
		_, err := s.UpdateRegistryAuth(ctx, c.id, c.in)
		wantErr(t, err, c.kind, c.field)
	}
	if user, pass, _ := store.RegistryCredentials(db, a.ID); user != "u2" || pass != "p2" {
		t.Errorf("refused updates changed the credentials: %q %q", user, pass)
	}
}

func TestTemplatePortLabels(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	tp, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("a"),
		PortLabels: map[string]string{"8888": "Jupyter"}})
	if err != nil || !maps.Equal(tp.PortLabels, map[string]string{"8888": "Jupyter"}) {
		t.Fatalf("create with a label of a default port: %+v %v", tp.PortLabels, err)
	}
	for _, labels := range []map[string]string{{"9999": "x"}, {"22": " "}, {"22": strings.Repeat("l", 65)}} {
		_, err := s.UpdateTemplate(ctx, tp.ID, mgmt.TemplateInput{PortLabels: labels})
		wantErr(t, err, mgmt.Invalid, "portsConfig")
	}
	// Removing a port drops its label; an empty map clears them.
	tp, err = s.UpdateTemplate(ctx, tp.ID, mgmt.TemplateInput{PortLabels: map[string]string{"8888": "Jupyter", "22": "SSH"}})
	if err != nil || len(tp.PortLabels) != 2 {
		t.Fatalf("two labels: %+v %v", tp.PortLabels, err)
	}
	tp, err = s.UpdateTemplate(ctx, tp.ID, mgmt.TemplateInput{Ports: []string{"22/tcp"}})
	if err != nil || !maps.Equal(tp.PortLabels, map[string]string{"22": "SSH"}) {
		t.Fatalf("after removing 8888: %+v %v", tp.PortLabels, err)
	}
	tp, err = s.UpdateTemplate(ctx, tp.ID, mgmt.TemplateInput{PortLabels: map[string]string{}})
	if err != nil || tp.PortLabels != nil {
		t.Fatalf("cleared: %+v %v", tp.PortLabels, err)
	}
}

func TestPodHourly(t *testing.T) {
	p := mgmt.Prices{GPUHourly: map[string]float64{"NVIDIA A40": 0.4, "NVIDIA L4": 0.3}, VCPUHourly: 0.01}
	for _, c := range []struct {
		pod  store.Pod
		want float64
	}{
		{store.Pod{GPU: &store.PodGPU{ID: "NVIDIA A40", Count: 2}, GPUCount: 2, GPUTypeIDs: []string{"NVIDIA L4"}, VCPUCount: 4}, 0.84},
		{store.Pod{GPUCount: 1, GPUTypeIDs: []string{"NVIDIA L4", "NVIDIA A40"}, VCPUCount: 2}, 0.32},
		{store.Pod{ComputeType: "CPU", VCPUCount: 8}, 0.08},
	} {
		if got := p.PodHourly(c.pod); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%+v: %v, want %v", c.pod, got, c.want)
		}
	}
}

func TestGPUCatalogue(t *testing.T) {
	devs := []gpu.Status{
		{Device: gpu.Device{Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068}, Holder: "w1"},
		{Device: gpu.Device{Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068}},
		{Device: gpu.Device{Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068}, Holder: "pod"},
		{Device: gpu.Device{Name: "Board X", MemoryMiB: 20000}},
	}
	cat := mgmt.GPUCatalogue(devs, mgmt.Prices{GPUHourly: map[string]float64{"NVIDIA A40": 0.4}})
	if len(cat) != len(gpu.Models)+1 || cat[0].ID != "NVIDIA A40" || cat[1].ID != "NVIDIA Board X" {
		t.Fatalf("order: %d types, first %q %q", len(cat), cat[0].ID, cat[1].ID)
	}
	a40, x := cat[0], cat[1]
	if !a40.Known || a40.Total != 3 || a40.Free != 1 || a40.Price != 0.4 || a40.MemoryGB != 48 || a40.Pool != "AMPERE_48" {
		t.Errorf("A40: %+v", a40)
	}
	if x.Known || x.Total != 1 || x.MemoryGB != 20 || x.Price != 0 {
		t.Errorf("local board: %+v", x)
	}
	for _, c := range []struct {
		g    mgmt.GPUType
		n    int
		want string
	}{{a40, 1, "MEDIUM"}, {a40, 2, "LOW"}, {a40, 4, ""}, {x, 1, "HIGH"}, {cat[2], 1, ""}} {
		if got := c.g.Stock(c.n); got != c.want {
			t.Errorf("%s x%d: %q, want %q", c.g.ID, c.n, got, c.want)
		}
	}
}

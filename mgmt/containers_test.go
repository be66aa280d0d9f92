package mgmt_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"berth/mgmt"
	"berth/store"
)

// TestContainerRules: a pod and a template take the same container
// settings by the same rules — each row is given to ApplyPodFields and to
// ApplyTemplate, and both refuse it naming the same field, or both take it
// into the same record fields.
func TestContainerRules(t *testing.T) {
	s := func(v string) *string { return &v }
	n := func(v int) *int { return &v }
	type row struct {
		name  string
		pod   mgmt.PodFields // the template's input is the same fields
		field string         // the field refused; "" accepted
	}
	rows := []row{
		{"name", mgmt.PodFields{Name: s("web")}, ""},
		{"empty name", mgmt.PodFields{Name: s("")}, "name"},
		{"image", mgmt.PodFields{ImageName: s("ghcr.io/a/b:1")}, ""},
		{"blank image", mgmt.PodFields{ImageName: s("  ")}, "imageName"},
		{"image control", mgmt.PodFields{ImageName: s("a\x00b")}, "imageName"},
		{"entrypoint", mgmt.PodFields{DockerEntrypoint: []string{"/bin/sh", "-c"}}, ""},
		{"entrypoint NUL", mgmt.PodFields{DockerEntrypoint: []string{"a\x00"}}, "dockerEntrypoint"},
		{"start cmd", mgmt.PodFields{DockerStartCmd: []string{"serve", "--port", "80"}}, ""},
		{"start cmd NUL", mgmt.PodFields{DockerStartCmd: []string{"\x00"}}, "dockerStartCmd"},
		{"env", mgmt.PodFields{Env: map[string]string{"A": "1"}}, ""},
		{"env bad name", mgmt.PodFields{Env: map[string]string{"A=B": "1"}}, "env"},
		{"ports", mgmt.PodFields{Ports: []string{"8888/http", "22/tcp"}}, ""},
		{"port protocol", mgmt.PodFields{Ports: []string{"80/udp"}}, "ports"},
		{"port zero", mgmt.PodFields{Ports: []string{"0/http"}}, "ports"},
		{"disks", mgmt.PodFields{ContainerDiskInGb: n(20), VolumeInGb: n(0), VolumeMountPath: s("/data")}, ""},
		{"disk too big", mgmt.PodFields{ContainerDiskInGb: n(1 << 30)}, "containerDiskInGb"},
		{"volume too big", mgmt.PodFields{VolumeInGb: n(1 << 30)}, "volumeInGb"},
		{"mount relative", mgmt.PodFields{VolumeMountPath: s("data")}, "volumeMountPath"},
		{"registry auth", mgmt.PodFields{ContainerRegistryAuthID: s("abcdefghij")}, ""},
		{"registry auth cleared", mgmt.PodFields{ContainerRegistryAuthID: s("")}, ""},
		{"registry auth blank", mgmt.PodFields{ContainerRegistryAuthID: s("  ")}, "containerRegistryAuthId"},
		{"registry auth control", mgmt.PodFields{ContainerRegistryAuthID: s("a\tb")}, "containerRegistryAuthId"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f := r.pod
			in := mgmt.TemplateInput{Name: f.Name, ImageName: f.ImageName, DockerEntrypoint: f.DockerEntrypoint,
				DockerStartCmd: f.DockerStartCmd, Env: f.Env, Ports: f.Ports, ContainerDiskInGb: f.ContainerDiskInGb,
				VolumeInGb: f.VolumeInGb, VolumeMountPath: f.VolumeMountPath, ContainerRegistryAuthID: f.ContainerRegistryAuthID}
			p := store.Pod{ComputeType: "GPU"}
			tp := mgmt.NewTemplateDefaults()
			perr, terr := mgmt.ApplyPodFields(&p, f), mgmt.ApplyTemplate(&tp, in, false)
			for what, err := range map[string]error{"pod": perr, "template": terr} {
				if r.field == "" {
					if err != nil {
						t.Errorf("%s: %v", what, err)
					}
					continue
				}
				var e *mgmt.Error
				if !errors.As(err, &e) || e.Kind != mgmt.Invalid || e.Field != r.field || !strings.Contains(e.Msg, r.field) {
					t.Errorf("%s: got %#v, want Invalid naming %s", what, err, r.field)
				}
			}
			if r.field != "" {
				return
			}
			// Both records hold what was given.
			pv, tv := reflect.ValueOf(p), reflect.ValueOf(tp)
			fv := reflect.ValueOf(f)
			for _, name := range []string{"Name", "ImageName", "DockerEntrypoint", "DockerStartCmd", "Env", "Ports",
				"ContainerDiskInGb", "VolumeInGb", "VolumeMountPath", "ContainerRegistryAuthID"} {
				given := fv.FieldByName(name)
				if given.IsNil() {
					continue
				}
				want := given
				if want.Kind() == reflect.Pointer {
					want = want.Elem()
				}
				for what, rec := range map[string]reflect.Value{"pod": pv, "template": tv} {
					if got := rec.FieldByName(name).Interface(); !reflect.DeepEqual(got, want.Interface()) {
						t.Errorf("%s.%s = %v, want %v", what, name, got, want)
					}
				}
			}
		})
	}
}

// TestPodContainerCPUVolume: the rule a pod adds to the shared ones — a CPU
// pod has no pod volume — is refused before any field is applied.
func TestPodContainerCPUVolume(t *testing.T) {
	v, name := 10, "x"
	p := store.Pod{ComputeType: "CPU", Name: "before"}
	err := mgmt.ApplyPodFields(&p, mgmt.PodFields{Name: &name, VolumeInGb: &v})
	if mgmt.KindOf(err) != mgmt.Invalid || p.Name != "before" {
		t.Fatalf("got %v, name %q", err, p.Name)
	}
}

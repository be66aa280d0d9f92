package v1api_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/mgmt"
	"berth/store"
)

// Without a container runtime a network volume is a host directory
// (runtime/voldirs); a pod using one is TestVolumeInUseByPod.
func TestNetworkVolumes(t *testing.T) {
	e := apitest.NewValidating(t)
	v := e.NewVolume("models", 100)
	dir := filepath.Join(e.Dir, "volumes", v.ID)
	if len(v.ID) != 10 || v.Size != 100 || v.DataCenterID != mgmt.DataCenterID || v.Path != dir || v.UsedBytes != 0 {
		t.Errorf("created %+v", v)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("volume directory %s: %v", dir, err)
	}

	// Usage is measured from the files.
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), bytes.Repeat([]byte{1}, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	w := e.NewVolume("other", 10)
	var got apitest.VolumeJSON
	e.Must(200, "GET", "/v1/networkvolumes/"+v.ID, nil, &got)
	if got.UsedBytes != 4096 {
		t.Errorf("usedBytes %d, want 4096", got.UsedBytes)
	}
	var list []apitest.VolumeJSON
	e.Must(200, "GET", "/v1/networkvolumes", nil, &list)
	if len(list) != 2 || list[0].ID != v.ID || list[1].ID != w.ID {
		t.Errorf("list %+v", list)
	}

	for _, c := range []struct {
		body  J
		words []string
	}{
		{J{"size": 10, "dataCenterId": mgmt.DataCenterID}, []string{"name"}},
		{J{"name": "x", "dataCenterId": mgmt.DataCenterID}, []string{"size"}},
		{J{"name": "x", "size": 0, "dataCenterId": mgmt.DataCenterID}, []string{"size"}},
		{J{"name": "x", "size": 9, "dataCenterId": mgmt.DataCenterID}, []string{"size", "10-4096 GB"}},
		{J{"name": "x", "size": 4097, "dataCenterId": mgmt.DataCenterID}, []string{"size", "10-4096 GB"}},
		{J{"name": "x", "size": 10}, []string{"dataCenterId", mgmt.DataCenterID}},
		{J{"name": "x", "size": 10, "dataCenterId": "the moon"}, []string{"dataCenterId", "the moon"}},
		{J{"name": "x", "size": 10, "dataCenterId": mgmt.DataCenterID, "region": "x"}, []string{"region"}},
	} {
		e.MustErr(400, "POST", "/v1/networkvolumes", c.body, c.words...)
	}
	if n := e.Count("/v1/networkvolumes"); n != 2 {
		t.Errorf("%d volumes after refused creates, want 2", n)
	}

	// Update: rename and grow; never shrink.
	e.Must(200, "PATCH", "/v1/networkvolumes/"+v.ID, J{"name": "llm", "size": 200}, &got)
	if got.Name != "llm" || got.Size != 200 {
		t.Errorf("after update: %+v", got)
	}
	e.Must(200, "POST", "/v1/networkvolumes/"+v.ID+"/update", J{"size": 200}, &got)
	e.MustErr(400, "PATCH", "/v1/networkvolumes/"+v.ID, J{"size": 50}, "grow")
	e.MustErr(400, "PATCH", "/v1/networkvolumes/"+v.ID, J{"size": 5000}, "size")
	e.MustErr(400, "PATCH", "/v1/networkvolumes/"+v.ID, J{"dataCenterId": mgmt.DataCenterID}, "dataCenterId")
	e.MustErr(400, "PATCH", "/v1/networkvolumes/"+v.ID, J{"name": ""}, "name")
	e.MustErr(404, "PATCH", "/v1/networkvolumes/zzzzzzzzzz", J{"name": "x"}, "not found")
	e.MustErr(404, "GET", "/v1/networkvolumes/zzzzzzzzzz", nil, "not found")

	// Attached volumes cannot be deleted.
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, J{"networkVolumeId": v.ID})
	e.MustErr(409, "DELETE", "/v1/networkvolumes/"+v.ID, nil, "endpoint "+ep.ID)
	e.Must(200, "PATCH", "/v1/endpoints/"+ep.ID, J{"networkVolumeId": "", "networkVolumeIds": []string{v.ID}}, nil)
	e.MustErr(409, "DELETE", "/v1/networkvolumes/"+v.ID, nil, "endpoint "+ep.ID)
	e.Must(200, "PATCH", "/v1/endpoints/"+ep.ID, J{"networkVolumeIds": []string{}}, nil)

	e.Must(204, "DELETE", "/v1/networkvolumes/"+v.ID, nil, nil)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("volume directory still there after delete: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.Dir, "volumes")); len(entries) != 1 {
		t.Errorf("volumes dir holds %d entries, want only %s", len(entries), w.ID)
	}
	e.MustErr(404, "DELETE", "/v1/networkvolumes/"+v.ID, nil, "not found")
	e.MustErr(400, "POST", "/v1/endpoints", J{"templateId": tpl.ID, "networkVolumeId": v.ID}, "networkVolumeId")
	e.MustErr(400, "POST", "/v1/endpoints", J{"templateId": tpl.ID, "networkVolumeIds": []string{v.ID}}, "networkVolumeIds")
}

// A volume a pod uses cannot be deleted; once the pod is gone, the
// runtime's volume goes with the record.
func TestVolumeInUseByPod(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	v := e.NewVolume("models", 100)
	p := e.NewPod(J{"imageName": "alpine:3", "networkVolumeId": v.ID})
	if in := e.PodInstance(p.ID); !in.Running {
		t.Fatalf("the pod's instance: %+v", in)
	}
	e.MustErr(409, "DELETE", "/v1/networkvolumes/"+v.ID, nil, "pod "+p.ID)
	if _, ok := e.Fake.Volumes()[v.ID]; !ok {
		t.Errorf("the refused delete removed the volume from the runtime: %v", e.Fake.Volumes())
	}
	e.Must(204, "DELETE", "/v1/pods/"+p.ID, nil, nil)
	e.Must(204, "DELETE", "/v1/networkvolumes/"+v.ID, nil, nil)
	if _, ok := e.Fake.Volumes()[v.ID]; ok {
		t.Errorf("the volume is still the runtime's after its delete: %v", e.Fake.Volumes())
	}
}

func TestVolumeBillingIntervals(t *testing.T) {
	e := apitest.NewValidating(t)
	v := e.NewVolume("v", 10)
	e.Must(200, "PATCH", "/v1/networkvolumes/"+v.ID, J{"size": 20}, nil)
	open, err := store.OpenUsage(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].Kind != store.UsageVolume || open[0].SizeGB != 20 {
		t.Fatalf("open intervals after a resize: %+v", open)
	}
	e.Must(204, "DELETE", "/v1/networkvolumes/"+v.ID, nil, nil)
	var n int
	store.UsageBetween(e.DB, time.Time{}, time.Now().Add(time.Hour), func(iv store.UsageInterval) error {
		if iv.End.IsZero() {
			t.Errorf("interval still open after delete: %+v", iv)
		}
		n++
		return nil
	})
	if n != 2 {
		t.Errorf("%d volume intervals, want 2 (10 GB then 20 GB)", n)
	}
}

func TestRegistryAuths(t *testing.T) {
	const secret = "s3cr3t-Pa55word"
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3", "registry.local/a:1"))
	raw := e.Must(200, "POST", "/v1/containerregistryauth", J{"name": "hub", "username": "me", "password": secret}, nil)
	if strings.Contains(string(raw), secret) {
		t.Errorf("create shows the password: %s", raw)
	}
	var a apitest.AuthJSON
	raw = e.Must(200, "GET", "/v1/containerregistryauth", nil, nil)
	if strings.Contains(string(raw), secret) {
		t.Errorf("list shows the password: %s", raw)
	}
	var list []apitest.AuthJSON
	e.Must(200, "GET", "/v1/containerregistryauth", nil, &list)
	if len(list) != 1 || list[0].Name != "hub" || list[0].Username != "me" || len(list[0].ID) != 25 {
		t.Fatalf("list %+v", list)
	}
	a = list[0]
	raw = e.Must(200, "GET", "/v1/containerregistryauth/"+a.ID, nil, nil)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "password") {
		t.Errorf("get shows the password: %s", raw)
	}
	user, pass, err := store.RegistryCredentials(e.DB, a.ID)
	if err != nil || user != "me" || pass != secret {
		t.Errorf("RegistryCredentials = %q, %q, %v", user, pass, err)
	}
	if fi, err := os.Stat(e.DB.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}

	for _, c := range []struct {
		body  J
		code  int
		words []string
	}{
		{J{"username": "u", "password": "p"}, 400, []string{"name"}},
		{J{"name": "n", "password": "p"}, 400, []string{"username"}},
		{J{"name": "n", "username": "u"}, 400, []string{"password"}},
		{J{"name": "n", "username": "u", "password": ""}, 400, []string{"password"}},
		{J{"name": "n", "username": "u", "password": "p", "email": "x"}, 400, []string{"email"}},
		{J{"name": "hub", "username": "u", "password": "p"}, 409, []string{"hub"}},
	} {
		e.MustErr(c.code, "POST", "/v1/containerregistryauth", c.body, c.words...)
	}
	// A wrongly typed password is refused without echoing it.
	code, out := e.Call("POST", "/v1/containerregistryauth", `{"name":"n","username":"u","password":12345678}`)
	if code != 400 || strings.Contains(string(out), "12345678") {
		t.Errorf("typed password: %d %s", code, out)
	}
	if n := e.Count("/v1/containerregistryauth"); n != 1 {
		t.Errorf("%d auths after refused creates, want 1", n)
	}

	// A pod pulling with it blocks the delete; a template does not, it
	// loses the reference (RunPod's v2.json rule, one rule for v1 too).
	tpl := e.NewTemplate("t", "registry.local/a:1", J{"containerRegistryAuthId": a.ID})
	p := e.NewPod(J{"imageName": "registry.local/a:1", "containerRegistryAuthId": a.ID})
	e.MustErr(409, "DELETE", "/v1/containerregistryauth/"+a.ID, nil, "pod "+p.ID)
	e.Must(200, "PATCH", "/v1/pods/"+p.ID, J{"containerRegistryAuthId": ""}, nil)
	e.Must(204, "DELETE", "/v1/containerregistryauth/"+a.ID, nil, nil)
	var got store.Template
	e.Must(200, "GET", "/v1/templates/"+tpl.ID, nil, &got)
	if got.ContainerRegistryAuthID != "" {
		t.Errorf("the template still names the deleted auth: %+v", got)
	}
	e.MustErr(404, "GET", "/v1/containerregistryauth/"+a.ID, nil, "not found")
	e.MustErr(404, "DELETE", "/v1/containerregistryauth/"+a.ID, nil, "not found")
	_ = raw
}

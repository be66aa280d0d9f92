package v1api_test

import (
	"math"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/mgmt"
	"berth/store"
)

type billRec struct {
	Amount            float64   `json:"amount"`
	Time              time.Time `json:"time"`
	TimeBilledMs      int64     `json:"timeBilledMs"`
	DiskSpaceBilledGb int       `json:"diskSpaceBilledGb"`
	PodID             string    `json:"podId"`
	EndpointID        string    `json:"endpointId"`
	GPUTypeID         string    `json:"gpuTypeId"`
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

const testPrices = `{
  "gpuHourly": {"NVIDIA A40": 0.4, "NVIDIA GeForce RTX 4090": 0.7},
  "vcpuHourly": 0.01,
  "volumeGbMonthly": 0.073
}`

func billingEnv(t *testing.T) *apitest.Env {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	if err := os.WriteFile(filepath.Join(e.Dir, mgmt.PricesFile), []byte(testPrices), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, iv := range []store.UsageInterval{
		{Kind: store.UsagePod, ID: "pod1", GPUTypeID: "NVIDIA A40", GPUCount: 2, VCPUCount: 4, Start: mustTime("2026-03-01T10:00:00Z"), End: mustTime("2026-03-01T12:30:00Z")},
		{Kind: store.UsagePod, ID: "pod2", VCPUCount: 8, Start: mustTime("2026-03-01T23:00:00Z"), End: mustTime("2026-03-02T01:00:00Z")},
		{Kind: store.UsageWorker, ID: "wrk1", EndpointID: "ep1", TemplateID: "tpl1", ImageName: "img:1", GPUTypeID: "NVIDIA A40", GPUCount: 1, VCPUCount: 2,
			Start: mustTime("2026-03-01T10:30:00Z"), End: mustTime("2026-03-01T11:00:00Z")},
		{Kind: store.UsageWorker, ID: "wrk2", EndpointID: "ep2", TemplateID: "tpl2", ImageName: "img:2", VCPUCount: 2, Start: mustTime("2026-03-02T00:00:00Z")}, // still open
		{Kind: store.UsageVolume, ID: "vol1", SizeGB: 10, Start: mustTime("2026-03-01T00:00:00Z"), End: mustTime("2026-03-01T12:00:00Z")},
		{Kind: store.UsageVolume, ID: "vol1", SizeGB: 20, Start: mustTime("2026-03-01T12:00:00Z")},
		{Kind: store.UsagePod, ID: "pod3", GPUTypeID: "NVIDIA A40", GPUCount: 1, Start: mustTime("2026-02-01T00:00:00Z"), End: mustTime("2026-02-01T01:00:00Z")}, // before the window
	} {
		if err := store.PutUsageInterval(e.DB, iv); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func checkBills(t *testing.T, e *apitest.Env, path string, want []billRec) {
	t.Helper()
	var got []billRec
	e.Must(200, "GET", path, nil, &got)
	if len(got) != len(want) {
		t.Fatalf("GET %s: %d records %+v, want %d %+v", path, len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if math.Abs(g.Amount-w.Amount) > 1e-9 || !g.Time.Equal(w.Time) || g.TimeBilledMs != w.TimeBilledMs || g.DiskSpaceBilledGb != w.DiskSpaceBilledGb ||
			g.PodID != w.PodID || g.EndpointID != w.EndpointID || g.GPUTypeID != w.GPUTypeID {
			t.Errorf("GET %s record %d:\n got %+v\nwant %+v", path, i, g, w)
		}
	}
}

func billWindow(start, end string, extra ...string) string {
	v := url.Values{"startTime": {start}, "endTime": {end}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Add(extra[i], extra[i+1])
	}
	return "?" + v.Encode()
}

func TestBillingPods(t *testing.T) {
	e := billingEnv(t)
	const d1, d2 = "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"
	w := billWindow(d1, "2026-03-03T00:00:00Z")
	checkBills(t, e, "/v1/billing/pods"+w, []billRec{
		{Amount: 0.08, Time: mustTime(d1), TimeBilledMs: 3600000, GPUTypeID: "CPU"},
		{Amount: 2.1, Time: mustTime(d1), TimeBilledMs: 9000000, GPUTypeID: "NVIDIA A40"},
		{Amount: 0.08, Time: mustTime(d2), TimeBilledMs: 3600000, GPUTypeID: "CPU"},
	})
	checkBills(t, e, "/v1/billing/pods"+billWindow(d1, "2026-03-03T00:00:00Z", "grouping", "podId"), []billRec{
		{Amount: 2.1, Time: mustTime(d1), TimeBilledMs: 9000000, PodID: "pod1"},
		{Amount: 0.08, Time: mustTime(d1), TimeBilledMs: 3600000, PodID: "pod2"},
		{Amount: 0.08, Time: mustTime(d2), TimeBilledMs: 3600000, PodID: "pod2"},
	})
	checkBills(t, e, "/v1/billing/pods"+billWindow(d1, d2, "bucketSize", "hour", "podId", "pod1"), []billRec{
		{Amount: 0.84, Time: mustTime("2026-03-01T10:00:00Z"), TimeBilledMs: 3600000, GPUTypeID: "NVIDIA A40"},
		{Amount: 0.84, Time: mustTime("2026-03-01T11:00:00Z"), TimeBilledMs: 3600000, GPUTypeID: "NVIDIA A40"},
		{Amount: 0.42, Time: mustTime("2026-03-01T12:00:00Z"), TimeBilledMs: 1800000, GPUTypeID: "NVIDIA A40"},
	})
	checkBills(t, e, "/v1/billing/pods"+billWindow("2026-01-01T00:00:00Z", "2026-12-31T00:00:00Z", "bucketSize", "month", "gpuTypeId", "CPU"), []billRec{
		{Amount: 0.16, Time: mustTime("2026-03-01T00:00:00Z"), TimeBilledMs: 7200000, GPUTypeID: "CPU"},
	})
	checkBills(t, e, "/v1/billing/pods"+billWindow("2026-01-01T00:00:00Z", "2026-12-31T00:00:00Z", "bucketSize", "year"), []billRec{
		{Amount: 0.16, Time: mustTime("2026-01-01T00:00:00Z"), TimeBilledMs: 7200000, GPUTypeID: "CPU"},
		{Amount: 2.5, Time: mustTime("2026-01-01T00:00:00Z"), TimeBilledMs: 12600000, GPUTypeID: "NVIDIA A40"},
	})
	// Weeks start on Monday: 2026-03-01 is a Sunday, 03-02 a Monday.
	checkBills(t, e, "/v1/billing/pods"+billWindow(d1, "2026-03-03T00:00:00Z", "bucketSize", "week", "podId", "pod2"), []billRec{
		{Amount: 0.08, Time: mustTime("2026-02-23T00:00:00Z"), TimeBilledMs: 3600000, GPUTypeID: "CPU"},
		{Amount: 0.08, Time: mustTime("2026-03-02T00:00:00Z"), TimeBilledMs: 3600000, GPUTypeID: "CPU"},
	})
	checkBills(t, e, "/v1/billing/pods"+billWindow(d1, d2, "podId", "nobody"), nil)
}

func TestBillingEndpoints(t *testing.T) {
	e := billingEnv(t)
	const d1, d2 = "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"
	const end = "2026-03-02T06:00:00Z"
	all := []billRec{
		{Amount: 0.21, Time: mustTime(d1), TimeBilledMs: 1800000, EndpointID: "ep1"},
		{Amount: 0.12, Time: mustTime(d2), TimeBilledMs: 21600000, EndpointID: "ep2"}, // open interval, to endTime
	}
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end), all)
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "templateId", "tpl1"), all[:1])
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "imageName", "img:2"), all[1:])
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "endpointId", "ep2"), all[1:])
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "gpuTypeId", "CPU", "gpuTypeId", "NVIDIA A40"), all)
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "dataCenterId", mgmt.DataCenterID), all)
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "dataCenterId", "EU-RO-1"), nil)
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "grouping", "podId"), []billRec{
		{Amount: 0.21, Time: mustTime(d1), TimeBilledMs: 1800000, PodID: "wrk1"},
		{Amount: 0.12, Time: mustTime(d2), TimeBilledMs: 21600000, PodID: "wrk2"},
	})
	checkBills(t, e, "/v1/billing/endpoints"+billWindow(d1, end, "grouping", "gpuTypeId"), []billRec{
		{Amount: 0.21, Time: mustTime(d1), TimeBilledMs: 1800000, GPUTypeID: "NVIDIA A40"},
		{Amount: 0.12, Time: mustTime(d2), TimeBilledMs: 21600000, GPUTypeID: "CPU"},
	})
}

func TestBillingNetworkVolumes(t *testing.T) {
	e := billingEnv(t)
	var got []struct {
		Amount            float64   `json:"amount"`
		Time              time.Time `json:"time"`
		DiskSpaceBilledGb int       `json:"diskSpaceBilledGb"`
	}
	e.Must(200, "GET", "/v1/billing/networkvolumes"+billWindow("2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"), nil, &got)
	// 12 h × 10 GB + 12 h × 20 GB at 0.073 / GB-month (730 h).
	if len(got) != 1 || math.Abs(got[0].Amount-0.036) > 1e-9 || got[0].DiskSpaceBilledGb != 20 || !got[0].Time.Equal(mustTime("2026-03-01T00:00:00Z")) {
		t.Errorf("volume billing %+v", got)
	}
	e.Must(200, "GET", "/v1/billing/networkvolumes"+billWindow("2026-03-01T11:00:00Z", "2026-03-01T13:00:00Z", "bucketSize", "hour"), nil, &got)
	if len(got) != 2 || math.Abs(got[0].Amount-0.001) > 1e-9 || got[0].DiskSpaceBilledGb != 10 || math.Abs(got[1].Amount-0.002) > 1e-9 || got[1].DiskSpaceBilledGb != 20 {
		t.Errorf("hourly volume billing %+v", got)
	}
}

func TestBillingErrorsAndPrices(t *testing.T) {
	e := billingEnv(t)
	for _, c := range []struct {
		path string
		word string
	}{
		{"/v1/billing/pods?bucketSize=minute", "bucketSize"},
		{"/v1/billing/pods?grouping=endpointId", "grouping"},
		{"/v1/billing/endpoints?grouping=templateId", "grouping"},
		{"/v1/billing/pods?startTime=yesterday", "startTime"},
		{"/v1/billing/networkvolumes?endTime=2026-13-01T00:00:00Z", "endTime"},
		{"/v1/billing/endpoints" + billWindow("2026-03-02T00:00:00Z", "2026-03-01T00:00:00Z"), "before"},
	} {
		e.MustErr(400, "GET", c.path, nil, c.word)
	}
	// Defaults: the last 30 days, by day, grouped by gpuTypeId / endpointId.
	e.Must(200, "GET", "/v1/billing/pods", nil, nil)
	e.Must(200, "GET", "/v1/billing/endpoints", nil, nil)
	e.Must(200, "GET", "/v1/billing/networkvolumes", nil, nil)

	// A pod's costPerHr comes from the same table: 1 × 0.7 + 2 vCPU × 0.01.
	p := e.NewPod(J{"imageName": "alpine:3"})
	if math.Abs(p.CostPerHr-0.72) > 1e-9 {
		t.Errorf("costPerHr %v, want 0.72", p.CostPerHr)
	}
	// A broken price table is reported, not read as zero.
	if err := os.WriteFile(filepath.Join(e.Dir, mgmt.PricesFile), []byte(`{"gpuHourly": {"x": -1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustErr(500, "GET", "/v1/billing/pods", nil, "prices.json", "negative")
	if err := os.WriteFile(filepath.Join(e.Dir, mgmt.PricesFile), []byte(`{"gpuHourly": {}, "vcpuHour": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.MustErr(500, "GET", "/v1/billing/networkvolumes", nil, "vcpuHour")
	// Without the file everything is free.
	os.Remove(filepath.Join(e.Dir, mgmt.PricesFile))
	checkBills(t, e, "/v1/billing/pods"+billWindow("2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z", "podId", "pod1"), []billRec{
		{Amount: 0, Time: mustTime("2026-03-01T00:00:00Z"), TimeBilledMs: 9000000, GPUTypeID: "NVIDIA A40"},
	})
}

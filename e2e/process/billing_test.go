package process_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth/internal/apptest"
	"berth/internal/dockertest"
	"berth/internal/proctest"
	"berth/store"
)

// TestCPUWorkerBilling runs `berth serve` (the built binary) with a price
// table, sends a job to a CPU endpoint through a real worker container,
// and reads the worker's time back from v1 and v2 billing: it is priced at
// the endpoint's vcpuCount × vcpuHourly. A usage record written before
// workers carried vCPUs still reads, with its time and amount 0.
func TestCPUWorkerBilling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containers")
	}
	dockertest.Require(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	data := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// $36 a vCPU-hour: a cent a vCPU-second, so seconds of worker time
	// give amounts well above the 6-decimal rounding.
	const vcpuHourly, vcpus = 36.0, 4
	if err := os.WriteFile(filepath.Join(data, "prices.json"), []byte(`{"vcpuHourly": 36}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// An old worker record: no vCPUs.
	t0 := time.Now().UTC().Truncate(time.Second)
	db, err := store.Open(filepath.Join(data, "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := store.UsageInterval{Kind: store.UsageWorker, ID: "oldworker", EndpointID: "oldendpoint", Start: t0.Add(-30 * time.Minute), End: t0.Add(-20 * time.Minute)}
	if err := store.PutUsageInterval(db, old); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	const key = "billing-e2e-key"
	// On loopback, as by default: containers reach the worker protocol
	// through the listener on the Docker bridge, same port.
	addr := proctest.Start(t, proctest.Options{Data: data, Key: key, Args: []string{"--rate-limits", "off"}}).Addr

	call := func(method, path string, body, out any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}

	var tpl, ep struct{ ID string }
	call("POST", "/v1/templates", map[string]any{"name": "billed", "imageName": image, "isServerless": true}, &tpl)
	call("POST", "/v1/endpoints", map[string]any{"name": "billed", "templateId": tpl.ID, "computeType": "CPU",
		"vcpuCount": vcpus, "workersMin": 1, "workersMax": 1}, &ep)
	var job struct{ ID, Status string }
	call("POST", "/v2/"+ep.ID+"/run", map[string]any{"input": map[string]any{"echo": "billed"}}, &job)
	deadline := time.Now().Add(3 * time.Minute)
	for job.Status != "COMPLETED" {
		if time.Now().After(deadline) || job.Status == "FAILED" {
			t.Fatalf("job %+v", job)
		}
		// status-sync long-polls up to wait ms for a final state.
		call("GET", "/v2/"+ep.ID+"/status-sync/"+job.ID+"?wait=60000", nil, &job)
	}
	type rec struct {
		Amount       float64
		TimeBilledMs int64
		EndpointID   string
	}
	// A window ending after the job but in the past (the worker still
	// runs), so every query prices the same time: the clock must pass the
	// window's end, the next whole second (RFC 3339 times here have
	// seconds). The worker's usage is recorded once its launch returns,
	// which a fast job may beat: a window that does not show it yet is
	// tried again with a later end.
	var (
		end    time.Time
		window func(extra ...string) string
		v1     []rec
		byEP   map[string]rec
		got    rec
	)
	for {
		end = time.Now().UTC().Truncate(time.Second).Add(time.Second)
		for !time.Now().After(end) {
			time.Sleep(100 * time.Millisecond)
		}
		window = func(extra ...string) string {
			v := url.Values{"startTime": {t0.Add(-time.Hour).Format(time.RFC3339)}, "endTime": {end.Format(time.RFC3339)}, "bucketSize": {"year"}}
			for i := 0; i+1 < len(extra); i += 2 {
				v.Set(extra[i], extra[i+1])
			}
			return "?" + v.Encode()
		}
		call("GET", "/v1/billing/endpoints"+window("grouping", "endpointId"), nil, &v1)
		byEP = map[string]rec{}
		for _, r := range v1 {
			byEP[r.EndpointID] = r
		}
		got = byEP[ep.ID]
		if got.TimeBilledMs > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(v1) != 2 || got.TimeBilledMs <= 0 || got.Amount <= 0 {
		t.Fatalf("v1 endpoint billing: %+v", v1)
	}
	// hours × vcpuCount × vcpuHourly (timeBilledMs is truncated to the ms).
	if want := float64(got.TimeBilledMs) / 3.6e6 * vcpus * vcpuHourly; math.Abs(got.Amount-want) > 1e-4 {
		t.Errorf("v1 amount %v for %d ms, want %v (%d vCPUs at %v)", got.Amount, got.TimeBilledMs, want, vcpus, vcpuHourly)
	}
	if o := byEP["oldendpoint"]; o.TimeBilledMs != 600000 || o.Amount != 0 {
		t.Errorf("old record without vCPUs: %+v, want 600000 ms and amount 0", o)
	}
	// The interval carries the endpoint's template too.
	var byTpl []rec
	call("GET", "/v1/billing/endpoints"+window("templateId", tpl.ID, "grouping", "endpointId"), nil, &byTpl)
	if len(byTpl) != 1 || byTpl[0] != got {
		t.Errorf("billing by templateId %s: %+v, want [%+v]", tpl.ID, byTpl, got)
	}

	var sls struct {
		Metadata struct {
			Totals struct{ TotalAmount, GPUAmount, CPUAmount float64 }
		}
	}
	call("GET", "/v2/billing/serverless"+window("serverlessId", ep.ID), nil, &sls)
	if tot := sls.Metadata.Totals; math.Abs(tot.TotalAmount-got.Amount) > 2e-6 || math.Abs(tot.CPUAmount-got.Amount) > 2e-6 || tot.GPUAmount != 0 {
		t.Errorf("v2 serverless totals %+v, want total = cpu = %v, gpu 0", tot, got.Amount)
	}
	var eps struct {
		Metadata struct{ Totals struct{ TotalAmount float64 } }
	}
	call("GET", "/v2/billing/endpoints"+window(), nil, &eps)
	if math.Abs(eps.Metadata.Totals.TotalAmount-got.Amount) > 2e-6 {
		t.Errorf("v2 endpoints total %v, want %v", eps.Metadata.Totals.TotalAmount, got.Amount)
	}
}

package mgmt_test

import (
	"testing"
	"time"

	"berth/mgmt"
	"berth/store"
)

// TestRecordRunStart: a started pod or worker's interval takes its vCPUs,
// template and image from the pod record or the worker's endpoint and its
// template; a record deleted meanwhile leaves them empty.
func TestRecordRunStart(t *testing.T) {
	_, db := newService(t)
	if err := db.Write(
		store.Put(store.Templates, "tpl1", store.Template{ID: "tpl1", ImageName: "img:1"}),
		store.Put(store.Endpoints, "ep1", store.Endpoint{ID: "ep1", TemplateID: "tpl1", ComputeType: "CPU", VCPUCount: 8}),
		store.Put(store.Pods, "pod1", store.Pod{ID: "pod1", TemplateID: "tpl1", ImageName: "img:2", VCPUCount: 3}),
	); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		in   store.UsageInterval
		want store.UsageInterval
	}{
		{"CPU worker", store.UsageInterval{Kind: store.UsageWorker, ID: "w1", EndpointID: "ep1"},
			store.UsageInterval{Kind: store.UsageWorker, ID: "w1", EndpointID: "ep1", TemplateID: "tpl1", ImageName: "img:1", VCPUCount: 8}},
		{"GPU pod", store.UsageInterval{Kind: store.UsagePod, ID: "pod1", GPUTypeID: "NVIDIA A40", GPUCount: 1},
			store.UsageInterval{Kind: store.UsagePod, ID: "pod1", GPUTypeID: "NVIDIA A40", GPUCount: 1, TemplateID: "tpl1", ImageName: "img:2", VCPUCount: 3}},
		{"endpoint gone", store.UsageInterval{Kind: store.UsageWorker, ID: "w2", EndpointID: "gone"},
			store.UsageInterval{Kind: store.UsageWorker, ID: "w2", EndpointID: "gone"}},
		{"pod gone", store.UsageInterval{Kind: store.UsagePod, ID: "gone"},
			store.UsageInterval{Kind: store.UsagePod, ID: "gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Start, tc.want.Start = start, start
			if err := mgmt.RecordRunStart(db, tc.in); err != nil {
				t.Fatal(err)
			}
			open, err := store.OpenUsage(db)
			if err != nil {
				t.Fatal(err)
			}
			for _, iv := range open {
				if iv.Kind == tc.in.Kind && iv.ID == tc.in.ID {
					iv.Start = iv.Start.UTC()
					if iv != tc.want {
						t.Errorf("recorded %+v\nwant     %+v", iv, tc.want)
					}
					return
				}
			}
			t.Errorf("no open interval for %s/%s in %+v", tc.in.Kind, tc.in.ID, open)
		})
	}
}

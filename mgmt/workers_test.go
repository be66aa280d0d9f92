package mgmt_test

import (
	"testing"
	"time"

	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

func TestMergeWorkers(t *testing.T) {
	e := store.Endpoint{ID: "ep", Name: "sdxl", Version: 3}
	seen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started := seen.Add(-time.Minute)
	ctr := func(id, state string) mgmt.WorkerInfo {
		return mgmt.WorkerInfo{ID: id, State: state, ImageName: "img:1", Version: 2, VCPUCount: 4, LastStartedAt: started}
	}
	tests := []struct {
		name       string
		containers []mgmt.WorkerInfo
		loads      []queue.WorkerLoad
		want       []mgmt.Worker // ID, State, DesiredStatus, Version, External, JobsInProgress, ImageName checked
	}{
		{"a container alone keeps its state", []mgmt.WorkerInfo{ctr("w1", "initializing")}, nil,
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "initializing", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
		{"in contact with Berth: not initializing", []mgmt.WorkerInfo{ctr("w1", "initializing")}, []queue.WorkerLoad{{WorkerID: "w1", LastSeen: seen}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "idle", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
		{"registered but silent: still initializing", []mgmt.WorkerInfo{ctr("w1", "initializing")}, []queue.WorkerLoad{{WorkerID: "w1"}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "initializing", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
		{"jobs in progress: running", []mgmt.WorkerInfo{ctr("w1", "idle")}, []queue.WorkerLoad{{WorkerID: "w1", Running: 2, LastSeen: seen}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "running", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING", JobsInProgress: 2}}},
		{"jobs done: idle before the runtime's next pass", []mgmt.WorkerInfo{ctr("w1", "running")}, []queue.WorkerLoad{{WorkerID: "w1", LastSeen: seen}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "idle", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
		{"a load-balancing worker (never talks to the queue) keeps the runtime's state", []mgmt.WorkerInfo{ctr("w1", "running")}, []queue.WorkerLoad{{WorkerID: "w1"}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "running", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
		{"lost wins", []mgmt.WorkerInfo{ctr("w1", "running")}, []queue.WorkerLoad{{WorkerID: "w1", Running: 1, Lost: true}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "lost", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING", JobsInProgress: 1}}},
		{"frozen stays frozen", []mgmt.WorkerInfo{ctr("w1", "frozen")}, []queue.WorkerLoad{{WorkerID: "w1", LastSeen: seen, Frozen: true}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "frozen", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
		{"exited container", []mgmt.WorkerInfo{ctr("w1", "exited")}, nil,
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "exited", Version: 2, ImageName: "img:1"}, DesiredStatus: "EXITED"}}},
		{"external worker: the queue's only, the endpoint's version", nil, []queue.WorkerLoad{{WorkerID: "x1", External: true, LastSeen: seen}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "x1", State: "idle", Version: 3}, DesiredStatus: "RUNNING", External: true}}},
		{"sorted by id", []mgmt.WorkerInfo{ctr("w2", "idle")}, []queue.WorkerLoad{{WorkerID: "w1", External: true}},
			[]mgmt.Worker{{WorkerInfo: mgmt.WorkerInfo{ID: "w1", State: "idle", Version: 3}, DesiredStatus: "RUNNING", External: true},
				{WorkerInfo: mgmt.WorkerInfo{ID: "w2", State: "idle", Version: 2, ImageName: "img:1"}, DesiredStatus: "RUNNING"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mgmt.MergeWorkers(e, tt.containers, tt.loads)
			if len(got) != len(tt.want) {
				t.Fatalf("%d workers, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.ID != w.ID || g.State != w.State || g.DesiredStatus != w.DesiredStatus || g.Version != w.Version ||
					g.External != w.External || g.JobsInProgress != w.JobsInProgress || g.ImageName != w.ImageName ||
					g.Name != "sdxl-"+w.ID {
					t.Errorf("worker %d: %+v, want %+v", i, g, w)
				}
				if w.ImageName != "" && (g.VCPUCount != 4 || !g.LastStartedAt.Equal(started)) {
					t.Errorf("worker %d lost its container fields: %+v", i, g)
				}
			}
		})
	}
}

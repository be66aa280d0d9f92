package mgmt_test

import (
	"testing"
	"time"

	"berth/mgmt"
	"berth/store"
)

func TestRepairUsageDecides(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	iv := func(kind, id string, start int) store.UsageInterval {
		return store.UsageInterval{Kind: kind, ID: id, Start: at(start)}
	}
	now := at(100)
	tests := []struct {
		name      string
		iv        store.UsageInterval
		inst      *mgmt.InstanceState
		lastAlive time.Time
		closed    bool
		end       time.Time
	}{
		{"running worker stays open", iv(store.UsageWorker, "w", 0), &mgmt.InstanceState{Running: true}, at(50), false, time.Time{}},
		{"exited worker: its finish time", iv(store.UsageWorker, "w", 0), &mgmt.InstanceState{FinishedAt: at(30)}, at(50), true, at(30)},
		{"exited, finish unknown: last alive", iv(store.UsageWorker, "w", 0), &mgmt.InstanceState{}, at(50), true, at(50)},
		{"gone worker: last alive", iv(store.UsageWorker, "w", 0), nil, at(50), true, at(50)},
		{"gone pod: last alive", iv(store.UsagePod, "p", 10), nil, at(50), true, at(50)},
		{"no stamp: now", iv(store.UsagePod, "p", 10), nil, time.Time{}, true, now},
		{"stamp before start: start", iv(store.UsageWorker, "w", 60), nil, at(50), true, at(60)},
		{"finish after now (clock skew): now", iv(store.UsageWorker, "w", 0), &mgmt.InstanceState{FinishedAt: at(120)}, at(50), true, now},
		{"volume stays open", iv(store.UsageVolume, "v", 0), nil, at(50), false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst := map[string]mgmt.InstanceState{}
			if tt.inst != nil {
				inst[mgmt.InstanceKey(tt.iv.Kind, tt.iv.ID)] = *tt.inst
			}
			got := mgmt.RepairUsage([]store.UsageInterval{tt.iv}, inst, tt.lastAlive, now)
			if !tt.closed {
				if len(got) != 0 {
					t.Fatalf("closed %+v", got)
				}
				return
			}
			if len(got) != 1 || !got[0].End.Equal(tt.end) {
				t.Fatalf("got %+v, want closed at %v", got, tt.end)
			}
		})
	}
}

func TestEndedPodsDecides(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	running := func(id string, started int) store.Pod {
		return store.Pod{ID: id, DesiredStatus: store.PodRunning, LastStartedAt: at(started)}
	}
	exit := &mgmt.PodExit{ExitCode: 137, Reason: "exit code 137", At: at(40)}
	tests := []struct {
		name      string
		pod       store.Pod
		inst      *mgmt.InstanceState
		lastAlive time.Time
		ended     bool
		want      mgmt.PodExit
	}{
		{"running container: adopted", running("p", 0), &mgmt.InstanceState{Running: true}, at(50), false, mgmt.PodExit{}},
		{"pending container: adopted", running("p", 0), &mgmt.InstanceState{Pending: true}, at(50), false, mgmt.PodExit{}},
		{"stopped pod: left as it is", store.Pod{ID: "p", DesiredStatus: store.PodExited}, nil, at(50), false, mgmt.PodExit{}},
		{"stopped container: its exit", running("p", 0), &mgmt.InstanceState{FinishedAt: at(40), Exit: exit}, at(50), true, *exit},
		{"removed container: last alive", running("p", 0), nil, at(50), true, mgmt.PodExit{Reason: "container removed", At: at(50)}},
		{"removed, stamp before its start: its start", running("p", 55), nil, at(50), true, mgmt.PodExit{Reason: "container removed", At: at(55)}},
		{"removed, no stamp: unknown", running("p", 10), nil, time.Time{}, true, mgmt.PodExit{Reason: "container removed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst := map[string]mgmt.InstanceState{}
			if tt.inst != nil {
				inst[mgmt.InstanceKey(store.UsagePod, tt.pod.ID)] = *tt.inst
			}
			got := mgmt.EndedPods([]store.Pod{tt.pod}, inst, tt.lastAlive)
			if !tt.ended {
				if len(got) != 0 {
					t.Fatalf("ended %+v", got)
				}
				return
			}
			if len(got) != 1 || got[0].ID != tt.pod.ID || got[0].Exit != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

package store_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"berth/store"
)

// The hand-written encoder must decode to exactly what encoding/json's
// reflection-based encoding of the same record decodes to.
func TestJobJSONRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.UTC)
	tests := []store.Job{
		{},
		{ID: "01a1", EndpointID: "ep", Seq: 7, Status: store.InQueue, CreatedAt: now, ExpiresAt: now.Add(time.Hour), QueuedAt: now,
			ExecutionTimeoutMs: 600000, Input: json.RawMessage(`{"a":[1,2,{"b":"c"}]}`)},
		{ID: "sync-x", Status: store.Failed, Sync: true, LowPriority: true, Webhook: "https://h/p?q=1&r=<2>",
			S3Config: json.RawMessage(`{"accessId":"a"}`), Policy: json.RawMessage(`{"ttl":10000}`),
			StartedAt: now, CompletedAt: now.Add(time.Second), RetainUntil: now.Add(time.Minute), WorkerID: "w1",
			Attempts: 2, Retries: 1, Output: json.RawMessage(`null`),
			Error: "line1\nline2\t\"quoted\" \\ back \x01 ctl é ü 日本 \u2028 <html>&", Input: json.RawMessage(`"s"`)},
		{ID: "bad-utf8", Error: "a\xffb\xc3", CreatedAt: now.In(time.FixedZone("X", 3600))},
	}
	for _, j := range tests {
		fast, err := j.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		type plain store.Job // no MarshalJSON: encoding/json's own encoding
		slow, err := json.Marshal(plain(j))
		if err != nil {
			t.Fatal(err)
		}
		var a, b store.Job
		if err := json.Unmarshal(fast, &a); err != nil {
			t.Fatalf("%s: %v", fast, err)
		}
		if err := json.Unmarshal(slow, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("decoded differently:\nfast %s\nslow %s", fast, slow)
		}
		var fm, sm map[string]any
		json.Unmarshal(fast, &fm)
		json.Unmarshal(slow, &sm)
		if !reflect.DeepEqual(fm, sm) {
			t.Errorf("different fields:\nfast %v\nslow %v", fm, sm)
		}
	}
}

func BenchmarkJobJSON(b *testing.B) {
	now := time.Now()
	j := store.Job{ID: "01a1fe18-a9a1-77d3-ba97-1cdea48f77dc", EndpointID: "o9cfyhwwya8orh", Status: store.InProgress,
		CreatedAt: now, ExpiresAt: now, QueuedAt: now, StartedAt: now, WorkerID: "w56r89b1z4tdle", Attempts: 1,
		ExecutionTimeoutMs: 600000, Input: json.RawMessage(`{"n":1}`)}
	for i := 0; i < b.N; i++ {
		j.MarshalJSON()
	}
}

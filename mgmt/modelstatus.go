package mgmt

import (
	"time"

	"berth/hfcache"
)

// ModelStatus is one of an endpoint's model references as every surface
// shows it (v1 and v2 endpoints' "models", GraphQL's Endpoint.models): where
// its download is, and the one sentence the status reason also says.
type ModelStatus struct {
	// Reference is the endpoint's model reference as given.
	Reference string `json:"reference"`
	// State: pending, downloading, failed or ready.
	State string `json:"state"`
	// Commit is the commit the reference resolved to, once looked up.
	Commit string `json:"commit,omitempty"`
	// BytesDone and BytesTotal: the download's progress (BytesTotal is 0
	// until the Hub listed the files).
	BytesDone  int64 `json:"bytesDone"`
	BytesTotal int64 `json:"bytesTotal"`
	// Error is why the last attempt failed (state failed); Attempts counts
	// the failed attempts and RetryAt is when the next one starts.
	Error    string     `json:"error,omitempty"`
	Attempts int        `json:"attempts,omitempty"`
	RetryAt  *time.Time `json:"retryAt,omitempty"`
	// Message: "downloading Qwen/Qwen2.5-0.5B-Instruct: 312 MB of 988 MB".
	Message string `json:"message"`
}

// ViewModel is p as the surfaces show it, for the reference as given.
func ViewModel(reference string, p hfcache.Progress) ModelStatus {
	v := ModelStatus{Reference: reference, State: string(p.State), Commit: p.Commit, BytesDone: p.Done, BytesTotal: p.Total,
		Error: p.Error, Attempts: p.Attempts, Message: p.String()}
	if p.State == hfcache.Failed && !p.RetryAt.IsZero() {
		at := p.RetryAt.UTC()
		v.RetryAt = &at
	}
	return v
}

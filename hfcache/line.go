package hfcache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"time"
)

// LinePrefix starts each progress line a download program writes (berth
// models-fetch, the Kubernetes download Job): what Berth reads back from
// its log to show the same progress as a download of its own.
const LinePrefix = "berth-model-progress "

type line struct {
	Ref      string    `json:"ref"`
	State    State     `json:"state"`
	Commit   string    `json:"commit,omitempty"`
	Done     int64     `json:"done"`
	Total    int64     `json:"total"`
	Error    string    `json:"error,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	RetryAt  time.Time `json:"retryAt,omitzero"`
}

// Line is p as one progress line (with its newline).
func (p Progress) Line() []byte {
	b, _ := json.Marshal(line{Ref: p.Ref.String(), State: p.State, Commit: p.Commit, Done: p.Done, Total: p.Total,
		Error: p.Error, Attempts: p.Attempts, RetryAt: p.RetryAt})
	return append(append([]byte(LinePrefix), b...), '\n')
}

// LastLine is the last progress line about ref in r (a download program's
// log); ok is false when there is none. Other lines are skipped.
func LastLine(r io.Reader, ref Ref) (p Progress, ok bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		b, found := bytes.CutPrefix(bytes.TrimSpace(sc.Bytes()), []byte(LinePrefix))
		if !found {
			continue
		}
		var l line
		if json.Unmarshal(b, &l) != nil || l.Ref != ref.String() {
			continue
		}
		switch l.State {
		case Pending, Downloading, Failed, Ready:
		default:
			continue
		}
		p, ok = Progress{Ref: ref, State: l.State, Commit: l.Commit, Done: l.Done, Total: l.Total,
			Error: l.Error, Attempts: l.Attempts, RetryAt: l.RetryAt}, true
	}
	return p, ok
}

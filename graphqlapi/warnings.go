package graphqlapi

import (
	"context"
	"strings"
	"sync"
)

// Warnings: what a mutation accepted but cannot honour on this host (an
// id Berth does not know, a GPU pod on a host without GPUs) is stored in
// the record's warnings (Pod.warnings, Endpoint.warnings) and also
// returned with the answer, in the response's top-level
// "extensions": {"warnings": ["pod abc: …"]} — the GraphQL place for
// what is not an error — and logged by Berth. runpod-python and runpodctl
// print neither extensions nor fields they did not select, so Berth's log
// line is what their users see without asking.

type warningsKey struct{}

type warningList struct {
	mu   sync.Mutex
	list []string
}

func withWarnings(ctx context.Context) (context.Context, *warningList) {
	w := &warningList{}
	return context.WithValue(ctx, warningsKey{}, w), w
}

// renameWarnings gives warnings about mgmt's fields ("gpuTypeIds: …")
// the names of the GraphQL input ("gpuIds: …"), as renamed does for errors.
func renameWarnings(ws []string, names map[string]string) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		if field, rest, ok := strings.Cut(w, ": "); ok {
			if to, ok := names[field]; ok {
				w = to + ": " + rest
			}
		}
		out = append(out, w)
	}
	return out
}

// noteWarnings adds the warnings of the record named what ("pod ID") to
// the answer.
func noteWarnings(ctx context.Context, what string, ws []string) {
	w, _ := ctx.Value(warningsKey{}).(*warningList)
	if w == nil || len(ws) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range ws {
		w.list = append(w.list, what+": "+s)
	}
}

func (w *warningList) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}
